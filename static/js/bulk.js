// Bulk actions (dashboard/bulk.py): a "select every row" box and the count of selected rows.
// Without this script every row's own checkbox still works; the server checks everything.
(function () {
  "use strict";
  var form = document.getElementById("bulk");
  if (!form) { return; }
  function boxes() {
    return Array.prototype.slice.call(document.querySelectorAll('input[name="pk"][form="bulk"]'));
  }
  var count = form.querySelector("[data-bulk-count]");
  var hint = count ? count.textContent : "";
  function show() {
    var n = boxes().filter(function (b) { return b.checked; }).length;
    if (count) { count.textContent = n ? n + " selected; a confirmation page follows" : hint; }
  }
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target.matches && target.matches("input[data-select-all]")) {
      boxes().forEach(function (b) { b.checked = target.checked; });
    }
    show();
  });
})();
