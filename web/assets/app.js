// gaffer's dashboard: refresh the page's live part (#live) from the same
// URL with ?fragment=1 every data-every ms while the tab is visible, and
// the "select all" box of the failed jobs. No library.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (live) {
    var every = parseInt(live.getAttribute("data-every"), 10) || 1500;
    var timer = null;
    var busy = false;
    var tick = function () {
      if (document.hidden || busy) return;
      var url = new URL(window.location.href);
      url.searchParams.set("fragment", "1");
      busy = true;
      fetch(url.toString(), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (t) { if (t !== null) live.innerHTML = t; })
        .catch(function () {})
        .then(function () { busy = false; });
    };
    var start = function () { if (!timer) timer = setInterval(tick, every); };
    var stop = function () { if (timer) { clearInterval(timer); timer = null; } };
    document.addEventListener("visibilitychange", function () {
      if (document.hidden) { stop(); } else { tick(); start(); }
    });
    if (!document.hidden) start();
  }
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      var boxes = document.querySelectorAll("input[name=id]");
      for (var i = 0; i < boxes.length; i++) boxes[i].checked = all.checked;
    });
  }
})();
