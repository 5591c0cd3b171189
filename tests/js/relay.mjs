// A real Nostr relay for the integration tests: @nostr-relay/core with @nostr-relay/validator
// and @nostr-relay/event-repository-sqlite (in memory) behind a `ws` server on 127.0.0.1.
//
//   node relay.mjs [PORT [CERT.pem KEY.pem]]   (0 or none: any free port; with a certificate
//                                              and key: wss:// over TLS)
//
// RELAY_FILTER_CACHE_MS: how long the relay answers a REQ whose filter it answered before from
// that earlier answer (@nostr-relay/core's filterResultCacheTtl; default 1000, as the library's):
// a listing published meanwhile is missing from it, as on a public relay that caches.
//
// Prints `relay ready port=<port>` on stdout, then one JSON line per EVENT a client publishes:
//   {"event": <the event>, "verified": <nostr-tools verifyEvent(event)>, "ok": <relay accepted>}
// so a test checks, outside mesh-llm's code, that every event it published is valid and signed.
import fs from 'node:fs';
import https from 'node:https';
import { WebSocketServer } from 'ws';
import { NostrRelay } from '@nostr-relay/core';
import { Validator } from '@nostr-relay/validator';
import { EventRepositorySqlite } from '@nostr-relay/event-repository-sqlite';
import { verifyEvent } from 'nostr-tools/pure';

const port = Number(process.argv[2] || 0);
const repo = new EventRepositorySqlite(':memory:');
await repo.init();
const relay = new NostrRelay(repo, {
  filterResultCacheTtl: Number(process.env.RELAY_FILTER_CACHE_MS || 1000) });
const validator = new Validator();
let wss;
let tlsServer;
if (process.argv[3]) {
  tlsServer = https.createServer({ cert: fs.readFileSync(process.argv[3]),
                                   key: fs.readFileSync(process.argv[4]) });
  wss = new WebSocketServer({ server: tlsServer, maxPayload: 1 << 20 });
} else {
  wss = new WebSocketServer({ host: '127.0.0.1', port, maxPayload: 1 << 20 });
}

wss.on('connection', (ws) => {
  relay.handleConnection(ws, '127.0.0.1');
  ws.on('message', async (data) => {
    let msg;
    try {
      msg = await validator.validateIncomingMessage(data);
    } catch (e) {
      ws.send(JSON.stringify(['NOTICE', String(e.message || e)]));
      return;
    }
    if (msg[0] === 'EVENT') {
      // copy before the relay sees it: verifyEvent caches its verdict on the object
      const ev = JSON.parse(JSON.stringify(msg[1]));
      const verified = verifyEvent(JSON.parse(JSON.stringify(ev)));
      const res = await relay.handleMessage(ws, msg);
      const ok = !!(res && res.success);
      process.stdout.write(JSON.stringify({ event: ev, verified, ok }) + '\n');
    } else {
      await relay.handleMessage(ws, msg);
    }
  });
  ws.on('close', () => relay.handleDisconnect(ws));
  ws.on('error', () => {});
});
if (tlsServer) {
  tlsServer.listen(port, '127.0.0.1', () => {
    process.stdout.write(`relay ready port=${tlsServer.address().port}\n`);
  });
} else {
  wss.on('listening', () => {
    process.stdout.write(`relay ready port=${wss.address().port}\n`);
  });
}
const stop = () => { wss.close(); relay.destroy().finally(() => process.exit(0)); };
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
