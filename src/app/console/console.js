/* mesh-llm console: a thin client of /api/events (or /api/status polling), /api/join and the
 * chat endpoint. Everything it shows comes from the node's status document. */
'use strict';
(() => {
  const $ = (id) => document.getElementById(id);
  const SVGNS = 'http://www.w3.org/2000/svg';
  const GONE_AFTER_MS = 60000; /* a dead or departed node stays greyed this long, then goes */
  const POLL_MS = 2000;
  const SSE_RETRY_MS = 10000;

  let status = null;
  /* --api-key-file: the key the user gave, kept in this tab only (sessionStorage) */
  const KEY_ITEM = 'mesh-llm-api-key';
  let apiKey = sessionStorage.getItem(KEY_ITEM) || '';
  const authed = (h) => Object.assign({}, h || {}, apiKey ? { Authorization: `Bearer ${apiKey}` } : {});
  const deadSince = new Map(); /* node id -> when this page first saw it dead or left */

  /* ---------------- helpers ---------------- */

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null) continue;
      if (k === 'text') e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }
  function sv(tag, attrs, text) {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const short = (id) => (id ? String(id).slice(0, 8) : '?');
  function bytes(n) {
    if (typeof n !== 'number' || !isFinite(n) || n <= 0) return '–';
    const u = ['B', 'KB', 'MB', 'GB', 'TB'];
    let i = 0;
    while (n >= 1000 && i < u.length - 1) { n /= 1000; i++; }
    return `${n >= 100 || i === 0 ? n.toFixed(0) : n.toFixed(1)} ${u[i]}`;
  }
  const num = (v, digits) => (typeof v === 'number' && isFinite(v) ? v.toFixed(digits) : '–');
  const isSelf = (id) => !!(id && status && status.node && id === status.node.id);
  function nodeName(id) {
    if (!id) return '?';
    return isSelf(id) ? `${short(id)} (this node)` : short(id);
  }
  /* an idle node (no mesh yet) is not "live": it waits for a join */
  const isIdle = (st) => !!(st && st.node && st.node.state === 'idle' && st.node.joined === false);
  const roleOf = (n) => n.role || (n.state === 'idle' ? 'idle' : 'worker');

  /* Read a text/event-stream body to its end, calling onData with each "data:" line's value
   * (what onData throws ends the reading). */
  async function readSSE(body, onData) {
    const reader = body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.search(/\r?\n\r?\n/)) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i).replace(/^\r?\n\r?\n/, '');
        for (const line of block.split(/\r?\n/)) if (line.startsWith('data:')) onData(line.slice(5).trim());
      }
    }
  }

  /* ---------------- live updates: events, else polling ---------------- */

  let es = null, pollTimer = null, retryTimer = null;

  function setMode(mode, text) {
    if (isIdle(status) && (mode === 'live' || mode === 'polling')) {
      mode = 'idle';
      text = 'idle · not in a mesh';
    }
    const c = $('conn');
    c.dataset.mode = mode;
    c.textContent = text;
  }

  /* The key asked for (a 401): the form shows, nothing polls until it is given. */
  function needKey(wrong) {
    stopPolling();
    clearTimeout(retryTimer);
    if (es) { es.close(); es = null; }
    setMode('locked', 'API key needed');
    $('key-panel').hidden = false;
    $('key-result').textContent = wrong ? 'that key was refused: try again' : '';
  }

  function eventsFailed() {
    startPolling();
    clearTimeout(retryTimer);
    retryTimer = setTimeout(startEvents, SSE_RETRY_MS);
  }

  /* /api/events read with fetch: EventSource cannot send the Authorization header */
  async function streamEvents() {
    try {
      const r = await fetch('/api/events', { headers: authed(), cache: 'no-store' });
      if (r.status === 401) { needKey(true); return; }
      if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
      stopPolling();
      setMode('live', 'live');
      await readSSE(r.body, (data) => {
        let st;
        try { st = JSON.parse(data); } catch (err) { return; }
        render(st);
        setMode('live', 'live');
      });
    } catch (err) { /* the node went away: poll */ }
    eventsFailed();
  }

  function startEvents() {
    if (apiKey) { streamEvents(); return; }
    if (!window.EventSource) { startPolling(); return; }
    es = new EventSource('/api/events');
    es.onopen = () => { stopPolling(); setMode('live', 'live'); };
    es.onmessage = (e) => {
      let st;
      try { st = JSON.parse(e.data); } catch (err) { return; }
      render(st);
    };
    es.onerror = () => {
      es.close();
      es = null;
      eventsFailed();
    };
  }

  function stopPolling() {
    clearTimeout(pollTimer);
    pollTimer = null;
  }

  function startPolling() {
    if (pollTimer) return;
    setMode('polling', 'polling');
    const tick = async () => {
      try {
        const r = await fetch('/api/status', { cache: 'no-store', headers: authed() });
        if (r.status === 401) { needKey(!!apiKey); return; }
        if (!r.ok) throw new Error(`HTTP ${r.status}`);
        render(await r.json());
        setMode('polling', 'polling');
      } catch (err) {
        setMode('offline', 'node unreachable');
      }
      if (pollTimer) pollTimer = setTimeout(tick, POLL_MS);
    };
    pollTimer = setTimeout(tick, 0);
  }

  /* ---------------- rendering ---------------- */

  function render(st) {
    status = st;
    const now = Date.now();
    for (const p of st.peers || []) {
      if (p.state === 'alive' || p.state === 'standby') deadSince.delete(p.id);
      else if (!deadSince.has(p.id)) deadSince.set(p.id, now);
    }
    renderSummary(st);
    renderTopology(st, now);
    renderRttMatrix(st);
    renderCatalog(st);
    renderSelf(st);
    renderRequests(st);
    renderChatModels(st);
    $('idle-banner').hidden = !isIdle(st);
    const c = $('conn');
    if (c.dataset.mode === 'live' || c.dataset.mode === 'polling' || c.dataset.mode === 'idle')
      setMode(es || !pollTimer ? 'live' : 'polling', es || !pollTimer ? 'live' : 'polling');
  }

  function renderSummary(st) {
    const alive = (st.peers || []).filter((p) => p.state === 'alive').length;
    const cat = st.catalog || [];
    const ready = cat.filter((m) => m.status === 'ready').length;
    const standby = (st.peers || []).filter((p) => p.state === 'standby').length;
    $('summary').textContent =
      `${alive + 1} node${alive ? 's' : ''}${standby ? ` (+${standby} standing by)` : ''}` +
      ` · ${ready}/${cat.length} models ready`;
  }

  function localModels(st) {
    return (st.models || []).filter((m) => m.status === 'ready').map((m) => m.name);
  }

  /* "name (F/S slots free)" for a model served with S parallel slots, F of them free */
  function slotsLabel(name, slots, busy) {
    if (!slots) return name;
    return `${name} (${Math.max(0, slots - (busy || 0))}/${slots} slots free)`;
  }

  function renderTopology(st, now) {
    const svg = $('topology');
    const self = st.node || {};
    const nodes = [{
      id: self.id, role: roleOf(self), state: 'self', vram: self.vram_bytes,
      models: (st.models || []).filter((m) => m.status === 'ready')
        .map((m) => slotsLabel(m.name, m.slots, m.busy)),
    }];
    /* a passive node (a standby, a client) is in no gossip: it knows the mesh's nodes from
     * its routing table */
    const route = st.route || {};
    for (const t of (self.passive || self.role === 'client') ? route.nodes || [] : []) {
      if (t.id === self.id) continue;
      nodes.push({
        id: t.id, role: 'host', state: 'alive', vram: t.vram_bytes, rtt: null,
        models: (st.catalog || []).filter((m) => (m.hosts || []).includes(t.id)).map((m) => m.name),
      });
    }
    for (const p of st.peers || []) {
      if (p.state !== 'alive' && p.state !== 'standby' &&
          now - (deadSince.get(p.id) || now) > GONE_AFTER_MS) continue;
      nodes.push({
        id: p.id, role: p.role || 'worker', state: p.state, vram: p.vram_bytes, rtt: p.rtt_ms,
        path: p.path === 'relayed' ? `relayed via ${short(p.via || '')}` : p.path,
        models: (p.serving || []).map((s) => (s.state && s.state !== 'ready'
          ? `${s.model} (${s.state})` : slotsLabel(s.model, s.http_ready && s.slots, s.busy))),
      });
    }
    /* a phone-width panel gets a tall drawing, a wide one a wide drawing */
    const narrow = svg.clientWidth > 0 && svg.clientWidth < 500;
    const [W, H, rx, ry] = narrow ? [360, 460, 115, 165] : [600, 360, 220, 125];
    svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
    const cx = W / 2, cy = H / 2 - 14;
    const others = nodes.length - 1;
    /* this node in the middle, the others on an ellipse around it */
    const pos = nodes.map((n, i) => {
      if (i === 0) return [cx, cy];
      const start = narrow ? -Math.PI / 2 : others === 1 ? 0 : -Math.PI / 2 + Math.PI / others;
      const a = start + (2 * Math.PI * (i - 1)) / others;
      return [cx + rx * Math.cos(a), cy + ry * Math.sin(a)];
    });
    svg.replaceChildren();
    const links = sv('g', { class: 'links' });
    const groups = sv('g', { class: 'nodes' });
    nodes.forEach((n, i) => {
      const [x, y] = pos[i];
      if (i > 0) {
        const live = n.state === 'alive' || n.state === 'standby';
        links.append(sv('line', { class: live ? 'link' : 'link dead', x1: cx, y1: cy, x2: x, y2: y }));
        if (live && typeof n.rtt === 'number') {
          /* the RTT and how the peer is reached (direct, mapped, punched, relayed via X) */
          links.append(sv('text', { class: 'rtt', x: (cx + x) / 2, y: (cy + y) / 2 - 4 },
            `${n.rtt < 10 ? n.rtt.toFixed(1) : n.rtt.toFixed(0)} ms` +
            (n.path && n.path !== 'direct' ? ` · ${n.path}` : '')));
        }
      }
      const g = sv('g', {
        class: `node ${n.state === 'self' ? 'self' : n.state}`, 'data-id': n.id || '',
        'data-state': n.state, 'data-role': n.role, transform: `translate(${x},${y})`,
      });
      g.append(sv('title', {}, `${n.id}\n${n.role} · ${n.state}`));
      g.append(sv('circle', { r: 22 }));
      g.append(sv('text', { class: 'label-id', y: 4 }, short(n.id)));
      const state = n.state === 'self' ? 'this node' : n.state;
      g.append(sv('text', { y: 36 }, `${n.role} · ${bytes(n.vram)} · ${state}`));
      const models = n.models.length ? n.models.slice(0, 2).join(', ') +
        (n.models.length > 2 ? ` +${n.models.length - 2}` : '') : 'no model';
      g.append(sv('text', { class: 'models', y: 50 }, models));
      groups.append(g);
    });
    svg.append(links, groups);
  }

  /* The node-to-node RTT matrix from the announced rtt_ms (node.peer_rtt_ms, peers[].peer_rtt_ms):
   * a cell is the larger of the two directions when both are known (as the planner reads it). */
  function renderRttMatrix(st) {
    const table = $('rtt-matrix');
    const rows = new Map();
    if (st.node && st.node.id) rows.set(st.node.id, st.node.peer_rtt_ms || {});
    for (const p of st.peers || []) {
      if (p.state === 'alive' || p.state === 'standby') rows.set(p.id, p.peer_rtt_ms || {});
    }
    const ids = [...rows.keys()];
    const show = ids.length > 1 && ids.some((i) => Object.keys(rows.get(i)).length > 0);
    table.hidden = !show;
    $('rtt-hint').hidden = !show;
    if (!show) return;
    const ms = (a, b) => {
      const x = rows.get(a)[b], y = rows.get(b)[a];
      const k = [x, y].filter((v) => typeof v === 'number');
      return k.length ? Math.max(...k) : null;
    };
    const head = el('tr', {}, el('th', {}));
    for (const j of ids) head.append(el('th', { text: short(j), title: j }));
    const body = ids.map((i) => {
      const tr = el('tr', {}, el('th', { text: short(i), title: i }));
      for (const j of ids) {
        const v = i === j ? null : ms(i, j);
        tr.append(el('td', {
          class: i === j ? 'self' : v === null ? 'unknown' : 'rtt',
          'data-from': i, 'data-to': j, text: i === j ? '·' : v === null ? '–' : String(v),
        }));
      }
      return tr;
    });
    table.replaceChildren(head, ...body);
  }

  /* The split layout of a model from this node's plan (host with workers, or worker layers) and
   * from peers' announcements. */
  function splitOf(st, name) {
    const plan = (st.plan || []).find((p) => p.model === name);
    if (plan && plan.mode === 'split') {
      if (plan.workers) {
        return 'split: ' + plan.workers.map((w) => `${short(w.id)} layers ${w.first}–${w.end}`)
          .join(', ') + ` (host ${short(st.node && st.node.id)})`;
      }
      if (plan.layers) return `split: this node layers ${plan.layers.first}–${plan.layers.end}`;
    }
    const splitters = (st.peers || []).filter((p) => (p.serving || [])
      .some((s) => s.model === name && s.split));
    return splitters.length ? `split over ${splitters.map((p) => short(p.id)).join(', ')}` : '';
  }

  function detailsOf(st, m) {
    const parts = [];
    if (m.type) parts.push(m.type);
    if (m.size_bytes) parts.push(bytes(m.size_bytes));
    const split = splitOf(st, m.name);
    if (split) parts.push(split);
    const demand = m.demand !== undefined ? m.demand : m.request_rate;
    if (typeof demand === 'number') parts.push(`${demand.toFixed(1)} req/min`);
    else if (demand && typeof demand === 'object') {
      const rate = demand.rate !== undefined ? demand.rate : demand.per_minute;
      if (typeof rate === 'number') parts.push(`${rate.toFixed(1)} req/min`);
    }
    const box = el('span', { text: parts.join(' · ') });
    const dl = m.download || m.progress;
    if (dl && typeof dl === 'object') {
      const done = dl.bytes !== undefined ? dl.bytes : dl.done;
      const total = dl.total !== undefined ? dl.total : dl.total_bytes;
      if (typeof done === 'number' && typeof total === 'number' && total > 0) {
        box.append(' ', el('progress', { max: total, value: done }),
          ` ${Math.floor((100 * done) / total)} %`);
      }
    } else if (typeof dl === 'number') {
      box.append(' ', el('progress', { max: 1, value: dl }), ` ${Math.floor(100 * dl)} %`);
    }
    return box;
  }

  function renderCatalog(st) {
    let cat = st.catalog;
    if (!cat) { /* before the planner reports: this node's models */
      cat = (st.models || []).map((m) => ({ name: m.name, type: m.type, status: m.status,
        size_bytes: m.size_bytes, hosts: m.status === 'ready' ? [st.node && st.node.id] : [] }));
    }
    const body = $('catalog').tBodies[0];
    body.replaceChildren(...cat.map((m) => {
      const hosts = (m.hosts && m.hosts.length ? m.hosts : m.servers || []);
      return el('tr', { 'data-model': m.name },
        el('td', { text: m.name }),
        el('td', { class: 'status', 'data-status': m.status || '', text: m.status || '?' }),
        el('td', { class: 'mono', text: hosts.map(nodeName).join(', ') || '–' }),
        el('td', {}, detailsOf(st, m)));
    }));
    $('catalog-empty').hidden = cat.length > 0;
  }

  function renderSelf(st) {
    const n = st.node || {};
    $('self-id').textContent = n.id || '–';
    $('self-role').textContent = n.id ? roleOf(n) : '–';
    $('self-mesh').textContent = n.mesh_id || (n.joined === false ? 'not in a mesh' : '–');
    $('self-ports').textContent =
      `API :${n.api_port || '–'} · console :${n.console_port || '–'} · QUIC :${n.quic_port || '–'}`;
    const mem = n.memory || {};
    $('self-mem').textContent = mem.offered_bytes !== undefined
      ? `${bytes(mem.offered_bytes)} offered, ${bytes(mem.free_bytes)} free` : bytes(n.vram_bytes);
    const devs = Array.isArray(n.devices) ? n.devices : [];
    $('self-devices').textContent = (n.llama_flavour ? `llama.cpp ${n.llama_flavour}: ` : '') +
      (devs.length ? devs.map((d) => `${d.name} ${d.description} (${bytes(d.total_bytes)}, ` +
        `${bytes(d.free_bytes)} free)`).join(', ') : 'no accelerator (CPU and RAM)');
    $('self-version').textContent = n.version || '–';
    const tok = $('self-token');
    if (typeof n.token === 'string' && n.token) {
      tok.textContent = n.token;
      tok.title = n.token;
      $('copy-token').disabled = false;
    } else {
      tok.textContent = '(shown to clients on this machine only)';
      $('copy-token').disabled = true;
    }
  }

  function renderRequests(st) {
    const rows = (st.requests || []).map((r) => el('tr', {},
      el('td', { text: new Date(r.time_ms).toLocaleTimeString() }),
      el('td', { text: r.model }),
      el('td', { class: 'mono', text: nodeName(r.node) }),
      el('td', { text: r.route }),
      el('td', { text: String(r.status) }),
      el('td', { text: r.ttft_ms === null ? '–' : `${num(r.ttft_ms, 0)} ms` }),
      el('td', { text: num(r.tokens_per_s, 1) })));
    $('requests').tBodies[0].replaceChildren(...rows);
  }

  function renderChatModels(st) {
    const sel = $('chat-model');
    const names = new Set();
    for (const m of st.catalog || []) if (m.status === 'ready' && m.type !== 'embedding' &&
      m.type !== 'reranking') names.add(m.name);
    for (const m of localModels(st)) names.add(m);
    const list = [...names].sort();
    const have = [...sel.options].map((o) => o.value);
    if (have.join('\n') === list.join('\n')) return;
    const keep = sel.value;
    sel.replaceChildren(...list.map((n) => el('option', { value: n, text: n })));
    if (list.includes(keep)) sel.value = keep;
  }

  /* ---------------- this node: copy the token ---------------- */

  $('copy-token').addEventListener('click', async () => {
    const t = status && status.node && status.node.token;
    if (!t) return;
    const b = $('copy-token');
    try {
      await navigator.clipboard.writeText(t);
    } catch (err) {
      const r = document.createRange();
      r.selectNodeContents($('self-token'));
      getSelection().removeAllRanges();
      getSelection().addRange(r);
      document.execCommand('copy');
    }
    b.textContent = 'copied';
    setTimeout(() => { b.textContent = 'copy'; }, 1500);
  });

  /* ---------------- chat ---------------- */

  const history = [];
  let chatUrl = '/api/chat';

  /* POST to the console's /api/chat; a node without it: the inference port (the page's origin
   * must then be allowed there, --allow-origin). */
  async function postChat(body) {
    const opts = {
      method: 'POST', headers: authed({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(body),
    };
    let r = await fetch(chatUrl, opts);
    if (r.status === 404 && chatUrl === '/api/chat' && status && status.node) {
      chatUrl = `${location.protocol}//${location.hostname}:${status.node.api_port}` +
        '/v1/chat/completions';
      r = await fetch(chatUrl, opts);
    }
    return r;
  }

  function chatMsg(cls, who, text) {
    const m = el('div', { class: `msg ${cls}` }, el('span', { class: 'who', text: who }),
      el('span', { class: 'text', text }));
    $('chat-log').append(m);
    $('chat-log').scrollTop = $('chat-log').scrollHeight;
    return m.querySelector('.text');
  }

  $('chat-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const input = $('chat-input');
    const text = input.value.trim();
    const model = $('chat-model').value;
    if (!text || !model) return;
    input.value = '';
    $('chat-send').disabled = true;
    chatMsg('user', 'you', text);
    history.push({ role: 'user', content: text });
    const meta = $('chat-meta');
    meta.textContent = 'waiting…';
    meta.removeAttribute('data-node');
    const t0 = performance.now();
    let out = null, answer = '', chunks = 0, tFirst = 0, timings = null;
    try {
      const r = await postChat({ model, messages: history, stream: true, max_tokens: 128 });
      const node = r.headers.get('X-Mesh-Node') || '';
      const route = r.headers.get('X-Mesh-Route') || 'local';
      if (!r.ok) {
        let msg = `HTTP ${r.status}`;
        try { msg = (await r.json()).error.message || msg; } catch (err) { /* not JSON */ }
        throw new Error(msg);
      }
      out = chatMsg('assistant', `${model} on ${nodeName(node)}`, '');
      await readSSE(r.body, (data) => {
        if (data === '[DONE]') return;
        let j;
        try { j = JSON.parse(data); } catch (err) { return; }
        if (j.error) throw new Error(j.error.message || 'error');
        if (j.timings) timings = j.timings;
        const d = j.choices && j.choices[0] && j.choices[0].delta;
        if (d && typeof d.content === 'string' && d.content) {
          if (!chunks) tFirst = performance.now();
          chunks++;
          answer += d.content;
          out.textContent = answer;
          $('chat-log').scrollTop = $('chat-log').scrollHeight;
        }
      });
      history.push({ role: 'assistant', content: answer });
      const secs = (performance.now() - tFirst) / 1000;
      const tps = timings && timings.predicted_per_second ? timings.predicted_per_second
        : chunks > 1 && secs > 0 ? (chunks - 1) / secs : null;
      const ntok = timings && timings.predicted_n ? timings.predicted_n : chunks;
      meta.dataset.node = node;
      meta.textContent = (isSelf(node) ? `answered by ${nodeName(node)}`
        : `answered by ${short(node)} (${route.startsWith('tunnel') ? 'through the mesh' : 'another node'})`) +
        ` · ${ntok} tokens · ${tps === null ? '–' : tps.toFixed(1)} tokens/s` +
        ` · first token after ${tFirst ? (tFirst - t0).toFixed(0) : '–'} ms`;
    } catch (err) {
      history.pop();
      chatMsg('error', 'error', String(err.message || err));
      meta.textContent = '';
    } finally {
      $('chat-send').disabled = false;
    }
  });

  /* ---------------- join ---------------- */

  $('join-form').addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = $('join-token').value.trim();
    const out = $('join-result');
    if (!token) { out.textContent = 'paste an invite token first'; return; }
    $('join-send').disabled = true;
    out.textContent = 'joining…';
    try {
      const r = await fetch('/api/join', {
        method: 'POST', headers: authed({ 'Content-Type': 'application/json' }),
        body: JSON.stringify({ token }),
      });
      let j = {};
      try { j = await r.json(); } catch (err) { /* empty */ }
      if (r.ok) {
        out.textContent = j.message || 'joining: the mesh will appear above';
        out.dataset.ok = '1';
      } else {
        out.textContent = (j.error && j.error.message) || `HTTP ${r.status}`;
        out.dataset.ok = '0';
      }
    } catch (err) {
      out.textContent = String(err.message || err);
    } finally {
      $('join-send').disabled = false;
    }
  });

  /* ---------------- the API key ---------------- */

  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const k = $('key-input').value.trim();
    if (!k) return;
    apiKey = k;
    sessionStorage.setItem(KEY_ITEM, k);
    $('key-input').value = '';
    $('key-panel').hidden = true;
    setMode('connecting', 'connecting…');
    startEvents();
  });

  startEvents();
})();
