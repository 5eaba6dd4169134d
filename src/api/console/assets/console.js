// The operator console's one script (served from the binary; the Content-Security-Policy
// allows no other). It follows a live page's changes over server-sent events and reads a picked
// identity file into the sign-in form.
'use strict';

(function () {
  const main = document.querySelector('main[data-live]');
  const state = document.getElementById('live-state');
  if (main && window.EventSource) {
    const source = new EventSource('/console/live?page=' + encodeURIComponent(main.dataset.live));
    source.addEventListener('open', function () {
      if (state) { state.textContent = 'live'; state.className = 'live-state connected'; }
      document.body.dataset.live = 'open';
    });
    source.addEventListener('error', function () {
      if (state) { state.textContent = 'reconnecting'; state.className = 'live-state'; }
    });
    source.addEventListener('main', function (event) {
      main.innerHTML = event.data;
      document.body.dataset.updates = String(Number(document.body.dataset.updates || '0') + 1);
    });
    source.addEventListener('signed-out', function () {
      source.close();
      window.location.assign('/console/sign-in');
    });
  }

  const picker = document.getElementById('identity-file');
  const field = document.getElementById('identity');
  if (picker && field) {
    picker.addEventListener('change', function () {
      const file = picker.files && picker.files[0];
      if (!file) { return; }
      file.text().then(function (text) { field.value = text; });
    });
  }
})();
