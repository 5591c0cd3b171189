// Publish one mesh listing (kind 31990) signed by a fresh key, as another mesh-llm would:
//   node publish_listing.mjs RELAY_URL CONTENT_JSON [TTL_S]
// The content's mesh_id and region become the d and region tags. Prints the relay's OK.
import WebSocket from 'ws';
import { finalizeEvent, generateSecretKey } from 'nostr-tools/pure';

const [url, contentJson, ttl = '600'] = process.argv.slice(2);
const c = JSON.parse(contentJson);
const now = Math.floor(Date.now() / 1000);
const ev = finalizeEvent({ kind: 31990, created_at: now, content: contentJson,
  tags: [['d', c.mesh_id], ['t', 'mesh-llm'], ['region', c.region],
         ['expiration', String(now + Number(ttl))]] }, generateSecretKey());
const ws = new WebSocket(url);
const timer = setTimeout(() => { console.error('no OK from the relay'); process.exit(1); }, 20000);
ws.on('open', () => ws.send(JSON.stringify(['EVENT', ev])));
ws.on('message', (m) => {
  const msg = JSON.parse(String(m));
  if (msg[0] === 'OK' && msg[1] === ev.id) {
    clearTimeout(timer);
    console.log(JSON.stringify(msg));
    ws.close();
    process.exit(msg[2] ? 0 : 1);
  }
});
ws.on('error', (e) => { console.error(String(e)); process.exit(1); });
