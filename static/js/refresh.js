// Live refresh without a library: every element with data-refresh="<seconds>" and an id is
// re-fetched from the same URL and swapped in place. Server-rendered, escaped HTML only; no
// inline script runs (innerHTML never executes scripts, and the CSP forbids inline ones).
//
// One status line above the first such element says how fresh the page is ("updated 12 s
// ago"), holds a Pause button, and says so visibly when a refresh fails: the operator must
// never read a stale page as a live one.
(function () {
  "use strict";
  var live = document.querySelectorAll("[data-refresh][id]");
  if (!live.length) { return; }

  var paused = false;
  var updated = Date.now(); // the page itself, as rendered
  var status = document.createElement("p");
  status.className = "refresh-status";
  status.id = "refresh-status";
  var age = document.createElement("span");
  age.setAttribute("data-refresh-age", "");
  var toggle = document.createElement("button");
  toggle.type = "button";
  toggle.name = "refresh-pause";
  toggle.textContent = "Pause";
  var failure = document.createElement("span");
  failure.className = "message error";
  failure.setAttribute("data-refresh-failure", "");
  failure.hidden = true;
  status.appendChild(age);
  status.appendChild(document.createTextNode(" "));
  status.appendChild(toggle);
  status.appendChild(document.createTextNode(" "));
  status.appendChild(failure);
  live[0].parentNode.insertBefore(status, live[0]);

  function showAge() {
    var seconds = Math.round((Date.now() - updated) / 1000);
    var when = seconds < 5 ? "just now" : seconds < 90 ? seconds + " s ago"
      : Math.round(seconds / 60) + " min ago";
    age.textContent = (paused ? "Paused; updated " : "Live; updated ") + when;
    status.setAttribute("data-state", paused ? "paused" : failure.hidden ? "live" : "failing");
  }

  toggle.addEventListener("click", function () {
    paused = !paused;
    toggle.textContent = paused ? "Resume" : "Pause";
    showAge();
  });

  function failed(reason) {
    failure.textContent = "Refresh failed at " + new Date().toLocaleTimeString() + " (" +
      reason + "): what you see is the page as last updated; trying again.";
    failure.hidden = false;
    showAge();
  }

  function refresh(el) {
    var seconds = parseInt(el.getAttribute("data-refresh"), 10) || 5;
    window.setTimeout(function tick() {
      // Not while paused or the operator works in it: focus inside, or rows selected.
      if (paused || document.hidden || el.contains(document.activeElement) ||
          el.querySelector("input[type=checkbox]:checked")) {
        window.setTimeout(tick, seconds * 1000);
        return;
      }
      fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" } })
        .then(function (r) {
          if (r.redirected && r.url.indexOf("/accounts/login/") !== -1) {
            throw new Error("logged out: reload the page to log in");
          }
          if (!r.ok) { throw new Error("HTTP " + r.status); }
          return r.text();
        })
        .then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var fresh = doc.getElementById(el.id);
          if (!fresh) { throw new Error("the page no longer has this part"); }
          if (!paused) { el.innerHTML = fresh.innerHTML; }
          updated = Date.now();
          failure.hidden = true;
          showAge();
        })
        .catch(function (err) { failed((err && err.message) || "no answer"); })
        .then(function () { window.setTimeout(tick, seconds * 1000); });
    }, seconds * 1000);
  }

  showAge();
  window.setInterval(showAge, 1000);
  live.forEach(refresh);
})();
