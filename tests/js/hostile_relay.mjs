// Hostile Nostr relays for the integration tests, one port per behaviour, all on 127.0.0.1:
//   malformed  answers every REQ with invalid messages: not JSON, wrong shapes, unknown types,
//              binary frames, deep nesting, events with missing or ill-typed fields
//   huge       answers with a 4 MiB text message (over the client's 256 KiB cap)
//   badsig     answers with listings that would win --auto (region "eu", huge memory) but are
//              forged: one with a changed content (id no longer its hash), one signed by another
//              key than its pubkey, one with a garbage signature; then EOSE
//   silent     accepts TCP connections and never answers (not even the WebSocket handshake)
//   midframe   completes the handshake, then sends half a frame and closes the connection
//   flood      answers with an endless stream of bad-signature events
//
//   node hostile_relay.mjs      prints `hostile ready malformed=P huge=P badsig=P silent=P ...`
import net from 'node:net';
import { WebSocketServer } from 'ws';
import { finalizeEvent, generateSecretKey, getPublicKey } from 'nostr-tools/pure';

const now = () => Math.floor(Date.now() / 1000);
function b64url(s) { return Buffer.from(s).toString('base64url'); }
function forgedListing(name) {
  const mesh = 'e'.repeat(32);
  const token = b64url(JSON.stringify({ v: 1, id: 'f'.repeat(64), addrs: ['127.0.0.1:9'], mesh,
                                        secret: 'a'.repeat(64) }));
  const content = JSON.stringify({ v: 1, name, mesh_id: mesh, region: 'eu', node_count: 1000,
    mem_total: 2 ** 50, mem_free: 2 ** 50, models: [{ name: 'stories260K', status: 'ready', served: true }],
    version: '0.1.0', token, node: 'f'.repeat(64) });
  return finalizeEvent({ kind: 31990, created_at: now(), content,
    tags: [['d', mesh], ['t', 'mesh-llm'], ['region', 'eu'], ['expiration', String(now() + 3600)]] },
    generateSecretKey());
}

function wsServer(onReq) {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (ws) => {
    ws.on('error', () => {});
    ws.on('message', (data) => {
      let m;
      try { m = JSON.parse(String(data)); } catch { return; }
      if (Array.isArray(m) && m[0] === 'REQ') onReq(ws, m[1]);
    });
  });
  return new Promise((res) => wss.on('listening', () => res(wss.address().port)));
}

const ports = {};
ports.malformed = await wsServer((ws, sub) => {
  const deep = '['.repeat(100000) + ']'.repeat(100000);
  const bad = ['', '[', '{"a":1}', 'null', '[]', '[1,2,3]', '["EVENT"]', `["EVENT","${sub}"]`,
    `["EVENT","${sub}",{}]`, `["EVENT","${sub}",{"id":5}]`, `["EOSE"]`, '["OK","x",true,""]',
    '["NOTICE"]', '["AUTH","x"]', deep, '\u0000\u0001\u0002', '"\\ud800"',
    `["EVENT","${sub}",{"id":"${'0'.repeat(64)}","pubkey":"${'0'.repeat(64)}","created_at":-5,"kind":31990,"tags":[],"content":"","sig":"${'0'.repeat(128)}"}]`,
    `["EVENT","${sub}",{"id":"${'0'.repeat(64)}","pubkey":"${'0'.repeat(64)}","created_at":1,"kind":31990,"tags":[[1,2]],"content":"","sig":"${'0'.repeat(128)}"}]`];
  for (const b of bad) ws.send(b);
  ws.send(Buffer.from([0, 1, 2, 3]), { binary: true });
  ws.send(`["EOSE","${sub}"]`);
});
ports.huge = await wsServer((ws, sub) => {
  ws.send(`["EVENT","${sub}",{"content":"${'x'.repeat(4 << 20)}"}]`);
});
ports.badsig = await wsServer((ws, sub) => {
  const a = forgedListing('evil-content');
  a.content = a.content.replace('evil-content', 'evil-changed'); // id no longer matches
  const b = forgedListing('evil-key');
  const other = forgedListing('evil-other');
  b.sig = other.sig; // a valid signature, of another event by another key
  const c = forgedListing('evil-garbage');
  c.sig = 'ff'.repeat(64);
  const d = forgedListing('evil-pubkey');
  d.pubkey = getPublicKey(generateSecretKey()); // signed by someone else than it claims
  for (const e of [a, b, c, d]) ws.send(JSON.stringify(['EVENT', sub, e]));
  ws.send(`["EOSE","${sub}"]`);
});
ports.flood = await wsServer((ws, sub) => {
  const e = forgedListing('evil-flood');
  e.sig = '00'.repeat(64);
  const msg = JSON.stringify(['EVENT', sub, e]);
  const pump = () => {
    if (ws.readyState !== 1) return;
    for (let i = 0; i < 200; i++) ws.send(msg);
    setTimeout(pump, 5);
  };
  pump();
});
ports.silent = await new Promise((res) => {
  const held = [];
  const s = net.createServer((c) => { held.push(c); c.on('error', () => {}); });
  s.listen(0, '127.0.0.1', () => res(s.address().port));
});
ports.midframe = await new Promise((res) => {
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  wss.on('connection', (ws) => {
    ws.on('error', () => {});
    const sock = ws._socket;
    // a text frame announcing 1000 bytes, of which 10 are sent, then the connection ends
    sock.write(Buffer.concat([Buffer.from([0x81, 0x7e, 0x03, 0xe8]), Buffer.from('["EVENT","')]));
    setTimeout(() => sock.destroy(), 50);
  });
  wss.on('listening', () => res(wss.address().port));
});
process.stdout.write('hostile ready ' + Object.entries(ports).map(([k, v]) => `${k}=${v}`).join(' ') + '\n');
process.on('SIGTERM', () => process.exit(0));
