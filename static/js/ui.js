// Small behaviours of the dashboard pages, kept out of the HTML so the
// Content-Security-Policy can forbid inline scripts (script-src 'self').
(function () {
  "use strict";
  // "Copy" buttons: data-copy="<element id>" or data-copy-target="<element id>".
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy], button[data-copy-target]");
    if (!button) { return; }
    var id = button.getAttribute("data-copy") || button.getAttribute("data-copy-target");
    var source = document.getElementById(id);
    if (!source || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(source.textContent).then(function () {
      button.textContent = "Copied";
    });
  });
  // <select data-autosubmit> submits its form when changed.
  document.addEventListener("change", function (event) {
    var select = event.target.closest("select[data-autosubmit]");
    if (select && select.form) { select.form.submit(); }
  });
})();
