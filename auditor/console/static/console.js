// The console's only script: while a re-audit runs, poll its progress fragment and swap it in; reload the
// page once the job ends so the before/after summary shows. Everything else works without JavaScript.
(function () {
  "use strict";
  function poll() {
    var box = document.getElementById("progress");
    if (!box || !box.dataset.poll) { return; }
    fetch(box.dataset.poll, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) { return response.ok ? response.text() : Promise.reject(response.status); })
      .then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#progress");
        if (!fresh) { return; }
        box.replaceWith(fresh);
        if (fresh.dataset.status !== "running") { window.location.reload(); } else { setTimeout(poll, 1000); }
      })
      .catch(function () { setTimeout(poll, 3000); });
  }
  document.addEventListener("DOMContentLoaded", function () { setTimeout(poll, 1000); });
}());
