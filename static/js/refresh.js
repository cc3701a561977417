// Live refresh without a library: every element with data-refresh="<seconds>" and an id is
// re-fetched from the same URL and swapped in place. Server-rendered, escaped HTML only; no
// inline script runs (innerHTML never executes scripts, and the CSP forbids inline ones).
(function () {
  "use strict";
  function refresh(el) {
    var seconds = parseInt(el.getAttribute("data-refresh"), 10) || 5;
    window.setTimeout(function tick() {
      if (document.hidden || el.contains(document.activeElement)) {
        window.setTimeout(tick, seconds * 1000);
        return;
      }
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (html) {
            var doc = new DOMParser().parseFromString(html, "text/html");
            var fresh = doc.getElementById(el.id);
            if (fresh) { el.innerHTML = fresh.innerHTML; }
          }
        })
        .catch(function () { /* keep the last good view; try again next tick */ })
        .then(function () { window.setTimeout(tick, seconds * 1000); });
    }, seconds * 1000);
  }
  document.querySelectorAll("[data-refresh][id]").forEach(refresh);
})();
