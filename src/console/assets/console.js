// leasehold console: refresh the page's <main> every data-refresh seconds,
// unless the tab is hidden, the box is unticked or a form field has focus.
// Plain JavaScript, no dependencies; pages work without it.
"use strict";
(function () {
  var seconds = Number(document.body.dataset.refresh || 0);
  var box = document.getElementById("autorefresh");
  if (!seconds || !box) return;
  try { box.checked = localStorage.getItem("leasehold.autorefresh") !== "off"; } catch (e) {}
  box.addEventListener("change", function () {
    try { localStorage.setItem("leasehold.autorefresh", box.checked ? "on" : "off"); } catch (e) {}
  });
  function busy() {
    var el = document.activeElement;
    return el && (el.tagName === "INPUT" || el.tagName === "SELECT" || el.tagName === "TEXTAREA");
  }
  function refresh() {
    if (!box.checked || document.hidden || busy()) return schedule();
    fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "refresh" } })
      .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (next && main) main.replaceWith(next);
      })
      .catch(function () { /* keep the page; try again later */ })
      .then(schedule);
  }
  function schedule() { setTimeout(refresh, seconds * 1000); }
  schedule();
})();
