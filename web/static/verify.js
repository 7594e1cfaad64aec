// Verifies an evidence page's inclusion proof in the browser with WebCrypto:
// the leaf bytes shown on the page hash to the leaf hash (RFC 6962:
// SHA-256(0x00 || leaf)), the audit path rebuilds the checkpoint root
// (RFC 9162 section 2.1.3.2), and, where the browser supports Ed25519, the
// checkpoint note carries a valid signature by the log's verifier key
// (golang.org/x/mod/sumdb/note format). Data comes from the page itself.
(function () {
  'use strict';
  var box = document.getElementById('verify-box');
  var data = document.getElementById('proof-data');
  var out = document.getElementById('verify-result');
  var btn = document.getElementById('verify-btn');
  if (!box || !data || !out || !btn) { return; }
  box.hidden = false;
  if (!window.crypto || !window.crypto.subtle || !window.TextEncoder) {
    btn.disabled = true;
    out.textContent = 'This browser cannot hash here (WebCrypto needs HTTPS or localhost): use the command below.';
    return;
  }
  var subtle = window.crypto.subtle;

  function hexToBytes(h) {
    h = h.trim();
    if (!/^([0-9a-f]{2})*$/.test(h)) { throw new Error('bad hex ' + h); }
    var b = new Uint8Array(h.length / 2);
    for (var i = 0; i < b.length; i++) { b[i] = parseInt(h.substr(2 * i, 2), 16); }
    return b;
  }
  function toHex(b) {
    return Array.prototype.map.call(b, function (x) { return (x < 16 ? '0' : '') + x.toString(16); }).join('');
  }
  function concat(parts) {
    var n = 0, off = 0;
    parts.forEach(function (p) { n += p.length; });
    var out = new Uint8Array(n);
    parts.forEach(function (p) { out.set(p, off); off += p.length; });
    return out;
  }
  function b64(s) {
    var bin = atob(s), b = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) { b[i] = bin.charCodeAt(i); }
    return b;
  }
  async function sha256(parts) {
    return new Uint8Array(await subtle.digest('SHA-256', concat(parts)));
  }
  function node(l, r) { return sha256([new Uint8Array([1]), l, r]); }

  // rootFromInclusionProof follows RFC 9162 section 2.1.3.2.
  async function rootFromInclusionProof(index, size, leafHash, path) {
    if (index >= size) { throw new Error('leaf index ' + index + ' is outside the tree of size ' + size); }
    var fn = index, sn = size - 1n, r = leafHash;
    for (var i = 0; i < path.length; i++) {
      if (sn === 0n) { throw new Error('the audit path is too long'); }
      if ((fn & 1n) === 1n || fn === sn) {
        r = await node(path[i], r);
        while ((fn & 1n) === 0n && fn !== 0n) { fn >>= 1n; sn >>= 1n; }
      } else {
        r = await node(r, path[i]);
      }
      fn >>= 1n; sn >>= 1n;
    }
    if (sn !== 0n) { throw new Error('the audit path is too short'); }
    return r;
  }

  // checkNote verifies the signed checkpoint note against the verifier key
  // "name+hash+base64(0x01 || ed25519 public key)". It answers a sentence.
  async function checkNote(noteText, vkey, size, rootHex) {
    var sep = noteText.lastIndexOf('\n\n');
    if (sep < 0) { throw new Error('the checkpoint note has no signature block'); }
    var text = noteText.slice(0, sep + 1);
    var lines = text.split('\n');
    if (lines[1] !== String(size) || toHex(b64(lines[2])) !== rootHex) {
      throw new Error('the signed checkpoint does not state this size and root');
    }
    // name+hash+key: the name has no "+", the base64 key may.
    var i = vkey.indexOf('+'), j = vkey.indexOf('+', i + 1);
    if (i <= 0 || j !== i + 9) { throw new Error('malformed verifier key'); }
    var k = [vkey.slice(0, i), vkey.slice(i + 1, j), vkey.slice(j + 1)];
    var kb = b64(k[2]);
    if (kb[0] !== 1 || kb.length !== 33) { return 'checkpoint signature not checked (key is not Ed25519)'; }
    var key;
    try {
      key = await subtle.importKey('raw', kb.slice(1), { name: 'Ed25519' }, false, ['verify']);
    } catch (e) {
      return 'checkpoint signature not checked here (this browser lacks Ed25519): use the command below';
    }
    var sigLines = noteText.slice(sep + 2).split('\n');
    var prefix = '\u2014 ' + k[0] + ' ';
    for (var i = 0; i < sigLines.length; i++) {
      if (sigLines[i].indexOf(prefix) !== 0) { continue; }
      var sig = b64(sigLines[i].slice(prefix.length));
      if (sig.length !== 68 || toHex(sig.slice(0, 4)) !== k[1]) { continue; }
      if (await subtle.verify({ name: 'Ed25519' }, key, sig.slice(4), new TextEncoder().encode(text))) {
        return 'checkpoint signature by ' + k[0] + ' is valid';
      }
      throw new Error('the checkpoint signature does not verify');
    }
    throw new Error('no signature by ' + k[0] + ' on the checkpoint');
  }

  async function verify() {
    var leafEl = document.getElementById('leaf-bytes');
    var leafText = leafEl.textContent;
    if (leafEl.dataset.src) {
      // A leaf too large to inline: fetch the exact bytes from the API.
      var res = await fetch(leafEl.dataset.src, { credentials: 'same-origin' });
      if (!res.ok) {
        throw new Error('could not fetch the leaf bytes (HTTP ' + res.status + ')');
      }
      leafText = (await res.json()).leaf;
    }
    var leaf = new TextEncoder().encode(leafText);
    var leafHash = await sha256([new Uint8Array([0]), leaf]);
    if (toHex(leafHash) !== data.dataset.leafHash) {
      throw new Error('the leaf bytes do not hash to the leaf hash');
    }
    var path = Array.prototype.map.call(document.querySelectorAll('#audit-path code'), function (c) { return hexToBytes(c.textContent); });
    var root = await rootFromInclusionProof(BigInt(data.dataset.index), BigInt(data.dataset.size), leafHash, path);
    if (toHex(root) !== data.dataset.root) {
      throw new Error('the audit path leads to ' + toHex(root).slice(0, 16) + '…, not the checkpoint root');
    }
    var msg = 'Verified: leaf ' + data.dataset.index + ' is in the log of ' + data.dataset.size + ' leaves';
    var noteEl = document.getElementById('checkpoint-note');
    var vkey = data.dataset.vkey;
    if (noteEl && vkey) {
      msg += '; ' + await checkNote(noteEl.textContent, vkey, data.dataset.size, data.dataset.root);
    }
    return msg + '.';
  }

  btn.addEventListener('click', function () {
    out.className = '';
    out.textContent = 'Verifying…';
    verify().then(function (msg) {
      out.className = 'ok';
      out.textContent = msg;
      box.dataset.verified = 'ok';
    }, function (err) {
      out.className = 'bad';
      out.textContent = 'Not verified: ' + err.message;
      box.dataset.verified = 'bad';
    });
  });
})();
