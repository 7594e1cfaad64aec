// ledger dashboard: small enhancements only. Every page works without it.
(function () {
  'use strict';
  // Copy buttons: <button class="copy" data-copy="ELEMENT-ID" hidden>.
  document.querySelectorAll('button.copy[data-copy]').forEach(function (btn) {
    var src = document.getElementById(btn.dataset.copy);
    if (!src || !navigator.clipboard) { return; }
    btn.hidden = false;
    btn.addEventListener('click', function () {
      navigator.clipboard.writeText(src.textContent).then(function () {
        btn.textContent = 'Copied';
        setTimeout(function () { btn.textContent = 'Copy'; }, 1500);
      }, function () { btn.textContent = 'Copy failed'; });
    });
  });
  // A link to a folded part (a gate, the counting rule) opens it and the
  // <details> around it.
  function reveal() {
    var id = decodeURIComponent(location.hash.slice(1));
    var el = id && document.getElementById(id);
    if (!el) { return; }
    for (var p = el; p; p = p.parentElement) {
      if (p.tagName === 'DETAILS') { p.open = true; }
    }
    el.scrollIntoView();
  }
  window.addEventListener('hashchange', reveal);
  reveal();
  // Forms that state their effect ask for confirmation.
  document.querySelectorAll('form[data-confirm]').forEach(function (f) {
    f.addEventListener('submit', function (ev) {
      if (!window.confirm(f.dataset.confirm)) { ev.preventDefault(); }
    });
  });
})();
