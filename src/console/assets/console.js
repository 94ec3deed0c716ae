// leasehold console: refresh the page's <main> (and who is acting) every
// data-refresh seconds, unless the tab is hidden, the box is unticked or a
// form field has focus.
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
        var doc = new DOMParser().parseFromString(text, "text/html");
        var next = doc.querySelector("main");
        var main = document.querySelector("main");
        // An action's message is shown once (the server hands it to the
        // first view of the page after the action), so the fresh <main>
        // lacks it: carry it over, or it would vanish after one refresh
        // period, before a slow reader has seen it.
        var flash = main && main.querySelector("#flash");
        if (next && flash && !next.querySelector("#flash")) {
          var title = next.querySelector("h1");
          if (title) title.after(flash); else next.prepend(flash);
        }
        if (next && main) main.replaceWith(next);
        var viewer = doc.getElementById("viewer");
        var shown = document.getElementById("viewer");
        if (viewer && shown) shown.replaceWith(viewer);
      })
      .catch(function () { /* keep the page; try again later */ })
      .then(schedule);
  }
  function schedule() { setTimeout(refresh, seconds * 1000); }
  schedule();
})();
