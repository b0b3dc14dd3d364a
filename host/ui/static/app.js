// Loadout's web UI. On open (and after the key changes, or a "reset"
// event) it reads the event history first (GET /api/events/history: the
// swap timeline and, with no activity log, the recent requests, and the id
// to resume after), then the admin API, then follows GET /api/events from
// that id (fetched as a stream so the API key can go in a header), so the
// page is full at first paint and no event falls between the two. Model
// rows are replaced by each "model" event, never merged. The Jobs view
// uses the jobs API with its own token. Two timers only: the summary
// strip's five-minute rates are re-read every 10 s (the window slides with
// time), and an open running job's output is re-read every 2 s (the jobs
// API has no log stream).
import { html, render, useEffect, useReducer, useRef, useState } from './vendor/htm-preact-standalone-3.1.1.js';

const KEY = 'loadout.apiKey';
const JOB_KEY = 'loadout.jobToken'; // the jobs API's own token: inference keys are not one
const MAX_ROWS = 500; // activity rows kept in the page
const MAX_TIMELINE = 200;
const SUMMARY_EVERY_MS = 10000;
const JOB_LOGS_EVERY_MS = 2000;
// The timeline's event types, and what the request history reads when
// there is no activity log.
const TIMELINE_TYPES = ['swap_start', 'swap_end', 'eviction', 'policy_failed', 'policy_handover'];
// Fields of a model that come from the catalog (GET /api/models), not from
// the router's status: a "model" event carries the status only.
const CATALOG_FIELDS = ['name', 'description', 'aliases', 'use_model_name', 'unlisted', 'backend'];
const TABS = [['models', 'Models'], ['activity', 'Activity'], ['logs', 'Logs'], ['jobs', 'Jobs'], ['policies', 'Policies']];

const authHeaders = () => {
  const k = localStorage.getItem(KEY);
  return k ? { Authorization: 'Bearer ' + k } : {};
};

const jobHeaders = () => {
  const k = localStorage.getItem(JOB_KEY);
  return k ? { Authorization: 'Bearer ' + k } : {};
};

// api calls the admin API with the API key, or with the job token when
// opts.job is set (the jobs API). Errors carry the HTTP status and the
// OpenAI-shaped error's message.
async function api(path, opts = {}) {
  const auth = opts.job ? jobHeaders() : authHeaders();
  const resp = await fetch(path, { ...opts, headers: { ...auth, ...(opts.headers || {}) } });
  if (!resp.ok) {
    let msg = resp.status + ' ' + resp.statusText;
    try { msg = (await resp.json()).error.message; } catch (_) { /* not JSON */ }
    const err = new Error(msg);
    err.status = resp.status;
    throw err;
  }
  return resp.headers.get('Content-Type')?.includes('json') ? resp.json() : resp.text();
}

// streamSSE reads server-sent events from path after event id `after`
// until signal aborts, resuming with Last-Event-ID after a cut.
async function streamSSE(path, after, signal, onEvent, onStatus) {
  let last = after ? String(after) : '';
  while (!signal.aborted) {
    try {
      const headers = authHeaders();
      if (last) headers['Last-Event-ID'] = last;
      const resp = await fetch(path, { headers, signal });
      if (resp.status === 401) { onStatus('unauthorized: enter the API key'); return; }
      if (!resp.ok) throw new Error(resp.status);
      onStatus('live');
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const ev = { type: 'message', data: '' };
          for (const line of block.split('\n')) {
            if (line.startsWith('id: ')) ev.id = line.slice(4);
            else if (line.startsWith('event: ')) ev.type = line.slice(7);
            else if (line.startsWith('data: ')) ev.data += line.slice(6);
          }
          if (ev.id) last = ev.id;
          if (ev.data) onEvent(ev.type, JSON.parse(ev.data), Number(ev.id || 0));
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    onStatus('reconnecting');
    await new Promise((r) => setTimeout(r, 1000)); // back off before reconnecting
  }
}

// Times: ISO 8601, 24-hour, the browser's time zone.
const pad = (n, w = 2) => String(n).padStart(w, '0');
const valid = (t) => t && !String(t).startsWith('0001');
const isoDate = (d) => `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}`;
const isoClock = (d) => `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
const fmtTime = (t) => (valid(t) ? isoClock(new Date(t)) : '–');
const fmtDate = (t) => (valid(t) ? (() => { const d = new Date(t); return isoDate(d) + ' ' + isoClock(d); })() : '–');
const fullTime = (t) => (valid(t) ? new Date(t).toISOString() : '');
const fmtBytes = (b) => (b ? (b / 2 ** 30).toFixed(1) + ' GiB' : '–');
const fmtS = (s) => (s ? (s < 1 ? (s * 1000).toFixed(0) + ' ms' : s.toFixed(2) + ' s') : '–');
const fmtRate = (x) => (x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x >= 0.01 || x === 0 ? x.toFixed(2) : x.toFixed(3));
const fmtGiB = (b) => (b / 2 ** 30).toFixed(1) + ' GiB';

// PALETTE are holders' colours, far apart in hue; colour gives each
// holder (a model, or a job) its own, the same on every GPU bar, legend and
// models row: models in catalog order first (setModelColours), others as
// they appear.
const PALETTE = ['#4e79a7', '#f28e2b', '#59a14f', '#b07aa1', '#e15759', '#76b7b2', '#edc948', '#ff9da7', '#9c755f', '#86bcb6', '#d37295', '#a0cbe8'];
const colours = new Map();
function colour(owner) {
  if (!colours.has(owner)) colours.set(owner, PALETTE[colours.size % PALETTE.length]);
  return colours.get(owner);
}
const setModelColours = (names) => [...names].sort().forEach(colour);

// ownerModel is the model a lease holder is: a replica ("m@2") is its model's.
const ownerModel = (owner) => owner.replace(/@[0-9]+$/, '');

// timelineItem is one timeline line for an event (history or live).
function timelineItem(type, d, id, time) {
  let text;
  switch (type) {
    case 'swap_start': text = `swap → ${d.target}${d.evict && d.evict.length ? ', evicting ' + d.evict.join(', ') : ''}${d.cold ? ' (cold load)' : ''} · ${d.policy || ''}`; break;
    case 'swap_end': text = d.error ? `${d.target} failed to load: ${d.error}` : `${d.target} ready after ${fmtS(d.seconds)}`; break;
    case 'eviction': text = `${d.model} stopped: ${d.reason}${d.by ? ' (for ' + d.by + ')' : ''}`; break;
    case 'policy_failed': text = `${d.role} policy failed in ${d.event}: ${d.error}`; break;
    case 'policy_handover': text = `${d.role} policy handed over`; break;
    default: return null;
  }
  return { id, kind: type === 'swap_start' ? 'swap' : type.startsWith('policy') ? 'policy' : type, text, time };
}

// byArrival orders activity rows newest arrival first (the log and the
// events come in completion order).
const byArrival = (a, b) => (a.time < b.time ? 1 : a.time > b.time ? -1 : 0);

// withRows merges rows into the activity list without repeats, by arrival.
function withRows(list, rows) {
  const seen = new Set(list.map((r) => r.id));
  const add = rows.filter((r) => !seen.has(r.id) && seen.add(r.id));
  if (!add.length) return list;
  return [...list, ...add].sort(byArrival).slice(0, MAX_ROWS);
}

// null means "not read yet": the page shows that it is loading, never a
// false "nothing".
const initial = {
  models: null, peers: null, gpus: null, policies: null, activity: null, timeline: null, summary: null,
  activitySource: '', activityMore: 0, jobTick: 0, conn: 'connecting', error: '', needKey: '',
};

function reducer(s, a) {
  switch (a.type) {
    case 'models': {
      const models = {};
      for (const m of a.models) models[m.model] = m;
      setModelColours(Object.keys(models));
      return { ...s, models };
    }
    case 'model': { // replaced, not merged: fields that became empty go
      const old = (s.models || {})[a.m.model] || {};
      const m = { ...a.m };
      for (const f of CATALOG_FIELDS) if (old[f] !== undefined) m[f] = old[f];
      return { ...s, models: { ...(s.models || {}), [m.model]: m } };
    }
    case 'peers': return { ...s, peers: a.peers };
    case 'peer': { // a peer event carries its whole status: replace its row, or add it (a reload added the peer)
      const have = s.peers || [];
      const peers = have.some((p) => p.peer === a.p.peer) ? have.map((p) => (p.peer === a.p.peer ? a.p : p))
        : [...have, a.p].sort((x, y) => x.peer.localeCompare(y.peer));
      return { ...s, peers };
    }
    case 'gpus': return { ...s, gpus: a.gpus };
    case 'policies': return { ...s, policies: a.policies };
    case 'summary': return { ...s, summary: a.summary };
    case 'request': return { ...s, activity: withRows(s.activity || [], [a.r]) };
    case 'history': return {
      ...s, activity: withRows(a.replace ? [] : (s.activity || []), a.rows), activitySource: a.source,
      activityMore: a.more === undefined ? s.activityMore : a.more,
    };
    case 'timeline': {
      const have = s.timeline || [];
      const seen = new Set(have.map((t) => t.id));
      const add = a.items.filter((t) => t && !seen.has(t.id));
      return { ...s, timeline: [...add, ...have].sort((x, y) => y.id - x.id).slice(0, MAX_TIMELINE) };
    }
    case 'timelineReset': return { ...s, timeline: [] };
    case 'jobs': return { ...s, jobTick: s.jobTick + 1 }; // a job changed: the Jobs view reloads
    case 'conn': return { ...s, conn: a.conn };
    case 'error': return { ...s, error: a.error };
    case 'needKey': return { ...s, needKey: a.why, conn: a.why ? 'unauthorized: enter the API key' : s.conn };
  }
  return s;
}

// KeyPrompt asks for the API key when the server answered 401: once, kept
// in the browser, then sent as a Bearer token with every call.
function KeyPrompt({ why, onSaved, onClose }) {
  const [v, setV] = useState('');
  const save = (e) => {
    e.preventDefault();
    if (v) localStorage.setItem(KEY, v); else localStorage.removeItem(KEY);
    onSaved();
  };
  return html`<div class="overlay"><form id="key-prompt" class="prompt" onSubmit=${save}>
    <h2>API key</h2>
    <p id="key-prompt-why">${why}</p>
    <input id="api-key" type="password" placeholder="API key" autocomplete="off" autofocus value=${v} onInput=${(e) => setV(e.target.value)} />
    <div class="row"><button id="api-key-save" type="submit">Use this key</button>
      ${onClose ? html`<button type="button" onClick=${onClose}>Close</button>` : ''}</div>
  </form></div>`;
}

// Backoff marks a model that keeps failing to start: from its second
// failed start in a row the host waits before the next (retry_at), and
// its requests fail at once until then. The mark takes itself down when
// retry_at passes, whether or not another event about the model comes.
function Backoff({ m }) {
  const [, tick] = useReducer((n) => n + 1, 0);
  const until = m.start_failures >= 2 && m.retry_at ? new Date(m.retry_at).getTime() : 0;
  const left = until - Date.now();
  useEffect(() => {
    if (left <= 0) return undefined;
    const t = setTimeout(tick, left + 50);
    return () => clearTimeout(t);
  }, [until]);
  return left > 0
    ? html` <span class="backoff" data-backoff=${m.start_failures} title=${m.start_failures + ' failed starts in a row; requests fail at once until then'}>retry ${fmtTime(m.retry_at)}</span>`
    : '';
}

// replicas shows how many of a model's replicas are ready (max_replicas >
// 1), each replica's state in its title.
const replicas = (m) => (m.max_replicas > 1
  ? html` <span class="replicas" data-replicas=${m.ready_replicas || 0} title=${(m.replica_state || '') + ': ' + (m.replicas || []).map((r) => r.id + ' ' + r.state + ', ' + r.in_flight + ' in flight').join('; ')}>${m.ready_replicas || 0}/${m.max_replicas} replicas</span>`
  : '');

// actions are the buttons a model's state allows: Load when it is stopped
// or failed (or asleep: a wake), Unload while it runs or starts.
function actions(m) {
  switch (m.state) {
    case 'stopped': case 'failed': return ['load'];
    case 'asleep': return ['load', 'unload'];
    case 'ready': case 'starting': case 'waking': return ['unload'];
    default: return [];
  }
}

const Loading = ({ what }) => html`<p class="muted loading" data-loading=${what}>Loading ${what}…</p>`;

function Models({ models, act }) {
  if (!models) return html`<section id="models"><h2>Models</h2><${Loading} what="models" /></section>`;
  const rows = Object.values(models).sort((a, b) => a.model.localeCompare(b.model));
  return html`<section id="models"><h2>Models</h2><div class="scroll"><table>
    <thead><tr><th>Model</th><th>State</th><th>GPUs</th><th class="num">VRAM est.</th><th class="num">measured</th>
      <th class="num">In flight</th><th class="num">Queued</th><th>Last use</th><th></th></tr></thead>
    <tbody>${rows.map((m) => html`<tr data-model=${m.model}>
      <td>${(m.devices || []).length ? html`<i class="swatch" style=${'background:' + colour(m.model)}></i>` : ''}${m.model}
        ${m.backend ? html` <span class="muted">${m.backend}</span>` : ''}
        ${(m.aliases || []).length ? html`<div class="aliases muted" data-aliases=${m.aliases.join(',')}>aka ${m.aliases.join(', ')}</div>` : ''}</td>
      <td><span class=${'state ' + m.state} data-state=${m.state} title=${m.sleep_level ? 'level ' + m.sleep_level + ' sleep, ' + fmtBytes(m.host_bytes) + ' of host memory' : ''}>${m.state}${m.sleep_level ? ' L' + m.sleep_level : ''}</span><${Backoff} m=${m} />${replicas(m)}
        ${m.last_error ? html`<div class="err reason" data-error>${m.last_error}</div>` : ''}</td>
      <td data-devices>${(m.devices || []).join(', ') || '–'}</td>
      <td class="num">${fmtBytes(m.vram_bytes)}</td><td class="num" data-measured>${fmtBytes(m.measured_vram_bytes)}</td>
      <td class="num">${m.in_flight || 0}</td><td class="num">${(m.queued || 0) + (m.loading || 0)}</td>
      <td title=${fullTime(m.last_use)}>${fmtTime(m.last_use)}</td>
      <td class="actions">${actions(m).map((a) => html`<button data-action=${a} data-model=${m.model} onClick=${() => act(a, m.model)}>${a === 'load' ? (m.state === 'asleep' ? 'Wake' : 'Load') : 'Unload'}</button>`)}</td>
    </tr>`)}</tbody>
  </table></div></section>`;
}

// Peers are the other servers whose models this one forwards to (peers:
// in the configuration): each one's health as its checks found it — up,
// down with why, hung when its checks get no answer at all — the requests
// forwarded to it now, and its models with the states it reported.
function Peers({ peers }) {
  if (!peers || !peers.length) return '';
  return html`<section id="peers"><h2>Peers</h2><div class="scroll"><table>
    <thead><tr><th>Peer</th><th>State</th><th>Since</th><th class="num">In flight</th><th>Models</th></tr></thead>
    <tbody>${peers.map((p) => html`<tr data-peer=${p.peer}>
      <td>${p.peer} <span class="muted">${p.url}</span></td>
      <td><span class=${'state ' + p.state} data-peer-state=${p.state}>${p.state}</span>${p.hung ? html` <span class="state failed" data-hung>hung</span>` : ''}
        ${p.error ? html`<div class="err reason" data-error>${p.error}</div>` : ''}</td>
      <td title=${fullTime(p.since)}>${fmtTime(p.since)}</td>
      <td class="num">${p.in_flight || 0}</td>
      <td>${(p.models || []).map((m) => html`<span class="peer-model" data-peer-model=${m.model} data-state=${m.state || 'unknown'}>${m.model}${m.state ? html` <span class=${'state ' + m.state}>${m.state}</span>` : ''}</span>`)}</td>
    </tr>`)}</tbody>
  </table></div></section>`;
}

// GPUBar is one device: leased of total, each holder in its own colour,
// labelled inside when it is wide enough, and a legend under it.
function GPUBar({ d }) {
  const pct = (b) => (d.total ? (100 * b) / d.total : 0);
  const holders = d.holders || [];
  return html`<div class="gpu" data-gpu=${d.index}>
    <div class="gpu-head"><b>GPU ${d.index}</b> <span class="muted">${d.name}</span>
      <span class="gpu-used" data-used=${d.leased}>${fmtGiB(d.leased)} / ${fmtGiB(d.total)} leased</span>
      ${d.utilization_percent >= 0 ? html`<span class="muted"> · ${d.utilization_percent}% busy</span>` : ''}</div>
    <div class="bar">${holders.map((h) => html`<span class=${'holder ' + (h.kind || 'model')} data-holder=${h.owner}
      style=${`width:${pct(h.bytes).toFixed(2)}%;background:${colour(ownerModel(h.owner))}`} title=${h.owner + ' ' + fmtBytes(h.bytes)}>${pct(h.bytes) > 12 ? h.owner : ''}</span>`)}</div>
    ${holders.length ? html`<ul class="legend">${holders.map((h) => html`<li><i class="swatch" style=${'background:' + colour(ownerModel(h.owner))}></i>${h.owner}${h.kind === 'job' ? ' (job)' : ''} <span class="muted">${fmtBytes(h.bytes)}</span></li>`)}</ul>`
      : html`<p class="muted legend">idle</p>`}
  </div>`;
}

// Summary is the strip at the top: GPUs, model counts, the last five
// minutes' rates, running jobs.
function Summary({ s }) {
  const fig = (key, value, label, cls = '') => html`<div class=${'fig ' + cls} data-fig=${key}><b>${value}</b><span>${label}</span></div>`;
  const ms = s.models ? Object.values(s.models) : null;
  const count = (f) => (ms ? ms.filter(f).length : '…');
  const queued = ms ? ms.reduce((n, m) => n + (m.queued || 0) + (m.loading || 0), 0) : '…';
  const sum = s.summary;
  const jobs = sum && sum.jobs ? (sum.jobs.RUNNING || 0) : '–';
  return html`<section id="summary" class="summary">
    <div class="figures">
      ${fig('loaded', count((m) => m.state === 'ready'), 'loaded')}
      ${fig('asleep', count((m) => m.state === 'asleep'), 'asleep')}
      ${fig('starting', count((m) => m.state === 'starting' || m.state === 'waking'), 'starting')}
      ${fig('queued', queued, 'queued')}
      ${fig('tps', sum ? fmtRate(sum.tokens_per_second) : '…', 'tokens/s · 5 min')}
      ${fig('rps', sum ? fmtRate(sum.requests_per_second) : '…', 'requests/s · 5 min')}
      ${fig('errors', sum ? sum.errors : '…', 'errors · 5 min', sum && sum.errors ? 'bad' : '')}
      ${fig('jobs', jobs, 'running jobs')}
    </div>
    <div class="gpus" id="gpus">${s.gpus === null ? html`<${Loading} what="GPUs" />`
      : s.gpus.length ? s.gpus.map((d) => html`<${GPUBar} d=${d} />`)
        : html`<p class="muted" data-gpus="none">No GPU accounting (no NVML device and none declared).</p>`}</div>
  </section>`;
}

function Queue({ models }) {
  if (!models) return '';
  const q = Object.values(models).filter((m) => m.queued || m.loading);
  return html`<section id="queue"><h2>Queue</h2>${q.length ? html`<table>
    <tr><th>Model</th><th class="num">Waiting on load</th><th class="num">Queued</th></tr>
    ${q.map((m) => html`<tr><td>${m.model}</td><td class="num">${m.loading || 0}</td><td class="num">${m.queued || 0}</td></tr>`)}
  </table>` : html`<p class="muted">Nothing waiting.</p>`}</section>`;
}

function Timeline({ items }) {
  return html`<section id="timeline"><h2>Swaps and evictions</h2>${items === null ? html`<${Loading} what="timeline" />`
    : items.length ? html`<ul class="timeline">
    ${items.map((t) => html`<li data-kind=${t.kind} data-event=${t.id}><time class="muted" datetime=${fullTime(t.time)} title=${fullTime(t.time)}>${fmtTime(t.time)}</time> ${t.text}</li>`)}
  </ul>` : html`<p class="muted">No swaps since the server started.</p>`}</section>`;
}

function Activity({ rows, source, more, loadMore }) {
  const [filter, setFilter] = useState('');
  if (rows === null) return html`<section id="activity"><h2>Activity</h2><${Loading} what="activity" /></section>`;
  const f = filter.trim().toLowerCase();
  const shown = f ? rows.filter((r) => [r.model, r.client, String(r.status), r.id].some((x) => (x || '').toLowerCase().includes(f))) : rows;
  return html`<section id="activity"><h2>Activity <span class="muted count">${rows.length} requests, newest arrival first${source === 'events' ? ' (recent; no activity log)' : ''}</span></h2>
    <input id="activity-filter" placeholder="filter: model, client, status" value=${filter} onInput=${(e) => setFilter(e.target.value)} />
    <div class="scroll tall"><table>
    <thead><tr><th>Arrived</th><th>Model</th><th>Client</th><th class="num">Status</th><th class="num">Wait</th><th class="num">TTFT</th>
      <th class="num">In</th><th class="num">Out</th><th class="num">Tok/s</th><th class="num">Duration</th><th>Error</th></tr></thead>
    <tbody>${shown.map((r) => html`<tr data-request=${r.id}>
      <td title=${fullTime(r.time)}>${fmtTime(r.time)}</td><td>${r.model}${r.replica ? html` <span class="muted" data-replica=${r.replica}>${r.replica}</span>` : ''}</td><td>${r.client || '–'}</td>
      <td class=${'num' + (r.status >= 400 ? ' err' : '')}>${r.status}</td>
      <td class="num" title=${r.load_wait_s > 0 ? fmtS(r.load_wait_s) + ' waiting on ' + (r.woke ? 'a wake' : 'a cold load') : ''}>${fmtS(r.queue_wait_s)}${r.load_wait_s > 0 ? html` <span class="muted" data-load=${r.woke ? 'wake' : 'cold'}>${r.woke ? 'wake' : 'cold'}</span>` : ''}</td><td class="num">${fmtS(r.ttft_s)}</td>
      <td class="num">${r.prompt_tokens}</td><td class="num">${r.completion_tokens}</td>
      <td class="num">${r.tokens_per_second ? r.tokens_per_second.toFixed(1) : '–'}</td><td class="num">${fmtS(r.duration_s)}</td>
      <td class="err reason">${r.error || ''}</td>
    </tr>`)}</tbody>
  </table></div>
  ${more ? html`<button id="activity-more" onClick=${loadMore}>Older requests</button>` : ''}</section>`;
}

function Policies({ policies }) {
  if (!policies) return html`<section id="policies"><h2>Policies</h2><${Loading} what="policies" /></section>`;
  return html`<section id="policies"><h2>Policies</h2><div class="scroll"><table>
    <tr><th>Role</th><th>Policy</th><th>Active</th><th>Health</th><th class="num">Crashes</th><th class="num">Refused</th></tr>
    ${policies.map((p) => html`<tr><td>${p.role}</td><td>${p.name}${p.fallback ? ' (fallback)' : ''}</td>
      <td>${p.active ? 'yes' : 'no'}</td>
      <td class=${p.healthy === false ? 'err reason' : ''}>${p.healthy === false ? 'disabled' + (p.disabled_reason ? ': ' + p.disabled_reason : '') : 'healthy'}${p.reload_error ? html`<div class="err reason">reload refused: ${p.reload_error}</div>` : ''}</td>
      <td class="num">${p.crashes}</td><td class="num">${p.counters ? p.counters.refused_effects : 0}</td></tr>`)}
  </table></div></section>`;
}

// follows keeps a <pre> scrolled to its end while the reader is at the end.
function useFollow(text) {
  const pre = useRef(null);
  const atEnd = useRef(true);
  useEffect(() => {
    const el = pre.current;
    if (el && atEnd.current) el.scrollTop = el.scrollHeight;
  }, [text]);
  const onScroll = (e) => { const el = e.target; atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight < 24; };
  return [pre, onScroll];
}

function Logs({ models, epoch }) {
  const [model, setModel] = useState('');
  const [text, setText] = useState('');
  const [pre, onScroll] = useFollow(text);
  useEffect(() => {
    const ctl = new AbortController();
    setText('');
    (async () => {
      try {
        // '' is every model server's output (llama-swap's upstream log),
        // 'proxy' Loadout's own lines; a model id, that model's.
        const resp = await fetch('/logs/stream/' + encodeURIComponent(model || 'upstream'), { headers: authHeaders(), signal: ctl.signal });
        if (!resp.ok) { setText('logs: ' + resp.status); return; }
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          setText((t) => (t + value).slice(-100000));
        }
      } catch (_) { /* aborted */ }
    })();
    return () => ctl.abort();
  }, [model, epoch]);
  return html`<section id="logs"><h2>Logs</h2>
    <select id="logs-model" value=${model} onChange=${(e) => setModel(e.target.value)}>
      <option value="">all models</option><option value="proxy">Loadout</option>${Object.keys(models || {}).sort().map((m) => html`<option value=${m}>${m}</option>`)}
    </select>
    <pre class="logs tall" ref=${pre} onScroll=${onScroll}>${text || html`<span class="muted">No output yet.</span>`}</pre></section>`;
}

const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELED']);
// cancellable: a job that has not ended and whose cancel is not asked yet.
const cancellable = (j) => !TERMINAL.has(j.state) && !j.cancel_requested;
// reason is why a job waits or failed, as text.
const reason = (j) => j.error || (j.latest_attempt && j.latest_attempt.message) || '';

function JobTokenForm({ onSaved }) {
  const [v, setV] = useState(localStorage.getItem(JOB_KEY) || '');
  const save = (e) => {
    e.preventDefault();
    if (v) localStorage.setItem(JOB_KEY, v); else localStorage.removeItem(JOB_KEY);
    onSaved();
  };
  return html`<form class="inline" onSubmit=${save}>
    <input id="job-token" type="password" placeholder="job token" autocomplete="off" value=${v} onInput=${(e) => setV(e.target.value)} />
    <button id="job-token-save" type="submit">Save token</button>
  </form>`;
}

// JobDetail is one job: its attempts, a Cancel button while it can be
// canceled, and the latest attempt's output, followed while it runs.
function JobDetail({ d, logs, cancel, close }) {
  const [pre, onScroll] = useFollow(logs);
  return html`<div id="job-detail" data-job=${d.id}>
    <h3>${d.id} <span class=${'state job ' + d.state} data-state=${d.state}>${d.state}</span>
      ${cancellable(d) ? html`<button id="job-cancel" onClick=${() => cancel(d.id)}>Cancel</button>` : ''}
      ${d.cancel_requested && !TERMINAL.has(d.state) ? html`<span class="muted">cancel requested</span>` : ''}
      <button id="job-close" onClick=${close}>Close</button></h3>
    ${reason(d) ? html`<p class=${d.state === 'FAILED' ? 'err reason' : 'reason'} id="job-reason">${reason(d)}</p>` : ''}
    <div class="scroll"><table id="job-attempts">
      <tr><th class="num">#</th><th>Submission id</th><th>Status</th><th>GPUs</th><th>Start</th><th>End</th><th>Failure</th></tr>
      ${(d.attempt_list || []).map((a) => html`<tr data-attempt=${a.attempt_no}>
        <td class="num">${a.attempt_no}</td><td>${a.submission_id}</td><td>${a.status || '–'}</td>
        <td>${(a.devices || []).join(', ') || '–'}</td><td>${fmtDate(a.started_at)}</td><td>${fmtDate(a.ended_at)}</td>
        <td class=${a.failure_kind ? 'err reason' : ''}>${a.failure_kind ? a.failure_kind + ': ' + (a.message || '') : '–'}</td></tr>`)}
    </table></div>
    <pre id="job-logs" class="logs" data-following=${TERMINAL.has(d.state) ? 'no' : 'yes'} ref=${pre} onScroll=${onScroll}>${logs || html`<span class="muted">No output yet.</span>`}</pre>
  </div>`;
}

// Jobs is the job queue (GET /api/jobs, with the job token), reloaded when
// it opens, when the token changes, on every job event (tick) and after a
// cancel; an open job that has not ended has its output re-read every 2 s.
function Jobs({ tick }) {
  const [epoch, setEpoch] = useState(0);
  const [list, setList] = useState(null);
  const [open, setOpen] = useState('');
  const [detail, setDetail] = useState(null);
  const [logs, setLogs] = useState('');
  const [err, setErr] = useState('');
  const [local, setLocal] = useState(0); // bumps after an action
  const [follow, setFollow] = useState(0); // bumps to re-read a running job's output
  useEffect(() => {
    let live = true;
    (async () => {
      try {
        const l = await api('/api/jobs', { job: true });
        if (!live) return;
        setList(l.jobs || []);
        setErr('');
      } catch (e) {
        if (!live) return;
        setList([]);
        // 401: no token or a wrong one; 503: the jobs API is off (the server says how to turn it on).
        setErr(e.status === 401 ? `Enter the job token to see the job queue (${e.message}).` : e.message);
      }
    })();
    return () => { live = false; };
  }, [epoch, tick, local]);
  useEffect(() => {
    if (!open) return undefined;
    let live = true;
    let timer;
    (async () => {
      try {
        const d = await api('/api/jobs/' + encodeURIComponent(open), { job: true });
        if (!live) return;
        setDetail(d);
        const text = d.attempts ? await api('/api/jobs/' + encodeURIComponent(open) + '/logs', { job: true }).catch((e) => 'logs: ' + e.message) : '';
        if (!live) return;
        setLogs(String(text));
        if (!TERMINAL.has(d.state)) timer = setTimeout(() => setFollow((n) => n + 1), JOB_LOGS_EVERY_MS);
      } catch (e) {
        if (live) setErr(`job ${open}: ${e.message}`);
      }
    })();
    return () => { live = false; clearTimeout(timer); };
  }, [open, epoch, tick, local, follow]);
  const cancel = async (id) => {
    try { await api('/api/jobs/' + encodeURIComponent(id) + '/cancel', { method: 'POST', job: true }); } catch (e) { setErr(`cancel ${id}: ${e.message}`); }
    setLocal((n) => n + 1);
  };
  const show = (id) => { setDetail(null); setLogs(''); setOpen(id); };
  return html`<section id="jobs"><h2>Jobs</h2>
    <${JobTokenForm} onSaved=${() => setEpoch((e) => e + 1)} />
    ${err ? html`<p class="err" id="jobs-error">${err}</p>` : ''}
    ${list === null ? html`<${Loading} what="jobs" />` : list.length ? html`<div class="scroll"><table id="jobs-list">
      <tr><th>Job</th><th>State</th><th>Waiting on / failed with</th><th>Workload</th><th>Executor</th><th class="num">GPUs</th><th class="num">Attempts</th><th>Created</th><th></th></tr>
      ${list.map((j) => html`<tr data-job=${j.id} class=${j.id === open ? 'selected' : ''}>
        <td><button class="link" data-action="open" data-job=${j.id} onClick=${() => show(j.id)}>${j.name || j.id}</button></td>
        <td><span class=${'state job ' + j.state} data-state=${j.state}>${j.state}</span></td>
        <td class=${(j.state === 'FAILED' ? 'err ' : '') + 'reason'} data-reason>${TERMINAL.has(j.state) && j.state !== 'FAILED' ? '' : reason(j)}</td>
        <td>${j.workload}</td><td>${j.executor}</td>
        <td class="num">${j.job.nnodes}×${j.job.gpus_per_node}</td><td class="num">${j.attempts}</td><td>${fmtDate(j.created_at)}</td>
        <td>${cancellable(j) ? html`<button data-action="cancel" data-job=${j.id} onClick=${() => cancel(j.id)}>Cancel</button>` : ''}</td></tr>`)}
    </table></div>` : err ? '' : html`<p class="muted">No jobs.</p>`}
    ${open && detail ? html`<${JobDetail} d=${detail} logs=${logs} cancel=${cancel} close=${() => { setOpen(''); setDetail(null); }} />` : ''}
  </section>`;
}

const tabOf = () => {
  const t = location.hash.slice(1);
  return TABS.some(([id]) => id === t) ? t : 'models';
};

function App() {
  const [s, dispatch] = useReducer(reducer, initial);
  const [epoch, setEpoch] = useState(0); // bumps when the key changes
  const [tab, setTab] = useState(tabOf());
  const [askKey, setAskKey] = useState(false); // the header's key button
  useEffect(() => {
    const on = () => setTab(tabOf());
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  useEffect(() => {
    const ctl = new AbortController();
    let throttled = {};
    // soon runs f at most once a second per name (bursts of events).
    const soon = (name, f) => {
      if (throttled[name]) return;
      throttled[name] = setTimeout(() => { throttled[name] = 0; if (!ctl.signal.aborted) f(); }, 1000);
    };
    const unauthorized = (e) => {
      if (e.status !== 401) return false;
      dispatch({ type: 'needKey', why: localStorage.getItem(KEY) ? `The server refused this key: ${e.message}.` : 'This server needs an API key.' });
      return true;
    };
    const gpus = () => api('/api/gpus').then((g) => dispatch({ type: 'gpus', gpus: g.devices || [] })).catch(() => {});
    const policies = () => api('/api/policies').then((p) => dispatch({ type: 'policies', policies: p.policies || [] })).catch(() => {});
    const summary = () => api('/api/summary').then((x) => dispatch({ type: 'summary', summary: x })).catch(() => {});
    const peers = () => api('/api/peers').then((p) => dispatch({ type: 'peers', peers: p.peers || [] })).catch(() => {});
    // load reads everything; the history first, so events after its
    // last_id are replayed by the stream and none falls between.
    const load = async () => {
      let after = 0;
      try {
        const h = await api(`/api/events/history?type=${[...TIMELINE_TYPES, 'request'].join(',')}&limit=1000`);
        after = h.last_id;
        dispatch({ type: 'timelineReset' });
        dispatch({ type: 'timeline', items: h.data.map((e) => timelineItem(e.type, e.data, e.id, e.time)) });
        const reqs = h.data.filter((e) => e.type === 'request').map((e) => e.data);
        const activity = api(`/api/activity?limit=${MAX_ROWS}`).then((a) => a, () => null); // null: no log (404)
        summary();
        const [m, g, p, pe] = await Promise.all([api('/api/models'), api('/api/gpus'), api('/api/policies'), api('/api/peers')]);
        dispatch({ type: 'models', models: m.models });
        dispatch({ type: 'peers', peers: pe.peers || [] });
        dispatch({ type: 'gpus', gpus: g.devices || [] });
        dispatch({ type: 'policies', policies: p.policies || [] });
        dispatch({ type: 'error', error: '' });
        dispatch({ type: 'needKey', why: '' });
        const a = await activity;
        dispatch(a ? { type: 'history', rows: [...a.data, ...reqs], replace: true, source: 'log', more: a.has_more ? a.next_before_id : 0 }
          : { type: 'history', rows: reqs, replace: true, source: 'events', more: 0 }); // the events' recent requests
      } catch (e) {
        if (!unauthorized(e)) dispatch({ type: 'error', error: e.message });
        return -1;
      }
      return after;
    };
    const onEvent = (type, d, id) => {
      const t = timelineItem(type, d, id, new Date().toISOString());
      if (t) dispatch({ type: 'timeline', items: [t] });
      switch (type) {
        case 'model': dispatch({ type: 'model', m: d }); break;
        case 'peer': dispatch({ type: 'peer', p: d }); break;
        case 'request': dispatch({ type: 'request', r: d }); soon('summary', summary); break;
        case 'swap_end': case 'eviction': soon('gpus', gpus); break;
        case 'policy_failed': case 'policy_handover': policies(); break;
        case 'job': dispatch({ type: 'jobs' }); soon('gpus', gpus); soon('summary', summary); break;
        case 'reset': load(); dispatch({ type: 'jobs' }); break;
      }
    };
    (async () => {
      const after = await load();
      if (after < 0 || ctl.signal.aborted) return;
      streamSSE('/api/events', after, ctl.signal, onEvent, (conn) => {
        dispatch({ type: 'conn', conn });
        if (conn.startsWith('unauthorized')) unauthorized({ status: 401, message: 'invalid API key' });
      });
    })();
    // The five-minute window slides with time: re-read it, and the peers'
    // requests in flight, which no event reports.
    const every = setInterval(() => { summary(); peers(); }, SUMMARY_EVERY_MS);
    return () => { ctl.abort(); clearInterval(every); Object.values(throttled).forEach(clearTimeout); throttled = {}; };
  }, [epoch]);
  const act = async (what, model) => {
    try {
      await api(`/api/models/${what}/${encodeURIComponent(model)}`, { method: 'POST' });
    } catch (e) { dispatch({ type: 'error', error: `${what} ${model}: ${e.message}` }); }
  };
  const loadMore = async () => {
    try {
      const a = await api(`/api/activity?limit=${MAX_ROWS}&before_id=${s.activityMore}`);
      dispatch({ type: 'history', rows: a.data, source: 'log', more: a.has_more ? a.next_before_id : 0 });
    } catch (e) { dispatch({ type: 'error', error: 'older requests: ' + e.message }); }
  };
  const rekey = () => { setAskKey(false); dispatch({ type: 'needKey', why: '' }); setEpoch((e) => e + 1); };
  let body;
  switch (tab) {
    case 'activity': body = html`<${Activity} rows=${s.activity} source=${s.activitySource} more=${s.activityMore} loadMore=${loadMore} />`; break;
    case 'logs': body = html`<${Logs} models=${s.models} epoch=${epoch} />`; break;
    case 'jobs': body = html`<${Jobs} tick=${s.jobTick} />`; break;
    case 'policies': body = html`<${Policies} policies=${s.policies} />`; break;
    default: body = html`<div class="cols"><div class="main-col"><${Models} models=${s.models} act=${act} /><${Peers} peers=${s.peers} /></div>
      <div class="side"><${Queue} models=${s.models} /><${Timeline} items=${s.timeline} /></div></div>`;
  }
  return html`<header><h1><img src="favicon.ico" alt="" width="20" height="20" /> Loadout</h1>
      <span class="conn muted" id="conn" data-conn=${s.conn}>${s.conn}</span>
      <button id="api-key-change" type="button" onClick=${() => setAskKey(true)}>API key</button></header>
    ${s.needKey || askKey ? html`<${KeyPrompt} why=${s.needKey || 'The key this page sends as a Bearer token.'} onSaved=${rekey} onClose=${s.needKey ? null : () => setAskKey(false)} />` : ''}
    ${s.error ? html`<p class="err" id="error">${s.error}</p>` : ''}
    <${Summary} s=${s} />
    <nav class="tabs">${TABS.map(([id, label]) => html`<a href=${'#' + id} data-tab=${id} class=${tab === id ? 'active' : ''}>${label}${id === 'activity' && s.activity ? html` <span class="muted">${s.activity.length}</span>` : ''}</a>`)}</nav>
    <main>${body}</main>`;
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading…" placeholder: render diffs against it, it does not replace it
render(html`<${App} />`, root);
