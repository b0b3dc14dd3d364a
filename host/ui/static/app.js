// Loadout's web UI. Live from GET /api/events (fetched as a stream so the
// API key can go in a header); the admin API is read once at start, after
// a reset event, and when an event says something it shows changed. The
// Jobs view uses the jobs API with its own token and reloads on job events.
import { html, render, useEffect, useReducer, useRef, useState } from './vendor/htm-preact-standalone-3.1.1.js';

const KEY = 'loadout.apiKey';
const JOB_KEY = 'loadout.jobToken'; // the jobs API's own token: inference keys are not one
const MAX_ROWS = 200;

const authHeaders = () => {
  const k = localStorage.getItem(KEY);
  return k ? { Authorization: 'Bearer ' + k } : {};
};

const jobHeaders = () => {
  const k = localStorage.getItem(JOB_KEY);
  return k ? { Authorization: 'Bearer ' + k } : {};
};

// api calls the admin API with the API key, or with the job token when
// opts.job is set (the jobs API).
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

// streamSSE reads server-sent events from path until signal aborts,
// resuming with Last-Event-ID after a cut.
async function streamSSE(path, signal, onEvent, onStatus) {
  let last = '';
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
          if (ev.data) onEvent(ev.type, JSON.parse(ev.data));
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    onStatus('reconnecting');
    await new Promise((r) => setTimeout(r, 1000)); // back off before reconnecting
  }
}

const initial = { models: {}, gpus: [], policies: [], activity: [], timeline: [], jobTick: 0, conn: 'connecting', error: '' };

function reducer(s, a) {
  switch (a.type) {
    case 'models': {
      const models = {};
      for (const m of a.models) models[m.model] = m;
      return { ...s, models };
    }
    case 'model':
      return { ...s, models: { ...s.models, [a.m.model]: { ...s.models[a.m.model], ...a.m } } };
    case 'gpus': return { ...s, gpus: a.gpus };
    case 'policies': return { ...s, policies: a.policies };
    case 'request': return { ...s, activity: [a.r, ...s.activity].slice(0, MAX_ROWS) };
    case 'history': { // /api/activity, newest first: after the live rows, without repeats
      const seen = new Set(s.activity.map((r) => r.id));
      return { ...s, activity: [...s.activity, ...a.rows.filter((r) => !seen.has(r.id))].slice(0, MAX_ROWS) };
    }
    case 'timeline': return { ...s, timeline: [a.t, ...s.timeline].slice(0, MAX_ROWS) };
    case 'jobs': return { ...s, jobTick: s.jobTick + 1 }; // a job changed: the Jobs view reloads
    case 'conn': return { ...s, conn: a.conn };
    case 'error': return { ...s, error: a.error };
  }
  return s;
}

const fmtBytes = (b) => (b ? (b / 2 ** 30).toFixed(1) + ' GiB' : '–');
const fmtS = (s) => (s ? (s < 1 ? (s * 1000).toFixed(0) + ' ms' : s.toFixed(2) + ' s') : '–');
const fmtTime = (t) => (t && !t.startsWith('0001') ? new Date(t).toLocaleTimeString() : '–');

function KeyForm({ onSaved }) {
  const [v, setV] = useState(localStorage.getItem(KEY) || '');
  const save = (e) => {
    e.preventDefault();
    if (v) localStorage.setItem(KEY, v); else localStorage.removeItem(KEY);
    onSaved();
  };
  return html`<form onSubmit=${save}>
    <input id="api-key" type="password" placeholder="API key" autocomplete="off" value=${v} onInput=${(e) => setV(e.target.value)} />
    <button id="api-key-save" type="submit">Save key</button>
  </form>`;
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

// ownerModel is the model a lease holder is: a replica ("m@2") is its model's.
const ownerModel = (owner) => owner.replace(/@[0-9]+$/, '');

function Models({ models, act }) {
  const rows = Object.values(models).sort((a, b) => a.model.localeCompare(b.model));
  return html`<section class="wide" id="models"><h2>Models</h2><div class="scroll"><table>
    <tr><th>Model</th><th>State</th><th>GPUs</th><th class="num">VRAM est.</th><th class="num">measured</th>
      <th class="num">In flight</th><th class="num">Queued</th><th>Last use</th><th></th></tr>
    ${rows.map((m) => html`<tr data-model=${m.model}>
      <td>${m.model}${m.backend ? html` <span class="muted">${m.backend}</span>` : ''}</td>
      <td><span class=${'state ' + m.state} data-state=${m.state}>${m.state}</span>${m.last_error ? html` <span class="err" title=${m.last_error}>!</span>` : ''}<${Backoff} m=${m} />${replicas(m)}</td>
      <td>${(m.devices || []).join(', ') || '–'}</td>
      <td class="num">${fmtBytes(m.vram_bytes)}</td><td class="num">${fmtBytes(m.measured_vram_bytes)}</td>
      <td class="num">${m.in_flight || 0}</td><td class="num">${(m.queued || 0) + (m.loading || 0)}</td>
      <td>${fmtTime(m.last_use)}</td>
      <td><button data-action="load" data-model=${m.model} onClick=${() => act('load', m.model)}>Load</button>
        <button data-action="unload" data-model=${m.model} onClick=${() => act('unload', m.model)}>Unload</button></td>
    </tr>`)}
  </table></div></section>`;
}

function GPUs({ gpus, models }) {
  if (!gpus.length) return html`<section id="gpus"><h2>GPUs</h2><p class="muted">No GPU accounting (no NVML device and none declared).</p></section>`;
  return html`<section id="gpus"><h2>GPUs</h2>${gpus.map((d) => html`<div>
    <div>${d.index}: ${d.name} <span class="muted">${fmtBytes(d.leased)} leased of ${fmtBytes(d.total)}, ${fmtBytes(d.free)} free</span></div>
    <div class="bar">${(d.holders || []).map((h) => html`<span class=${models[ownerModel(h.owner)] ? 'model' : 'job'}
      style=${'width:' + (100 * h.bytes / d.total).toFixed(2) + '%'} title=${h.owner + ' ' + fmtBytes(h.bytes)}>${h.owner}</span>`)}</div>
  </div>`)}</section>`;
}

function Queue({ models }) {
  const q = Object.values(models).filter((m) => m.queued || m.loading);
  return html`<section id="queue"><h2>Queue</h2>${q.length ? html`<table>
    <tr><th>Model</th><th class="num">Waiting on load</th><th class="num">Queued</th></tr>
    ${q.map((m) => html`<tr><td>${m.model}</td><td class="num">${m.loading || 0}</td><td class="num">${m.queued || 0}</td></tr>`)}
  </table>` : html`<p class="muted">Nothing waiting.</p>`}</section>`;
}

function Activity({ rows }) {
  const [filter, setFilter] = useState('');
  const f = filter.trim().toLowerCase();
  const shown = f ? rows.filter((r) => [r.model, r.client, String(r.status), r.id].some((x) => (x || '').toLowerCase().includes(f))) : rows;
  return html`<section class="wide" id="activity"><h2>Activity</h2>
    <input id="activity-filter" placeholder="filter: model, client, status" value=${filter} onInput=${(e) => setFilter(e.target.value)} />
    <div class="scroll"><table>
    <tr><th>Time</th><th>Model</th><th>Client</th><th class="num">Status</th><th class="num">Wait</th><th class="num">TTFT</th>
      <th class="num">In</th><th class="num">Out</th><th class="num">Tok/s</th><th class="num">Duration</th></tr>
    ${shown.map((r) => html`<tr data-request=${r.id}>
      <td>${fmtTime(r.time)}</td><td>${r.model}${r.replica ? html` <span class="muted" data-replica=${r.replica}>${r.replica}</span>` : ''}</td><td>${r.client || '–'}</td>
      <td class=${'num' + (r.status >= 400 ? ' err' : '')} title=${r.error || ''}>${r.status}</td>
      <td class="num">${fmtS(r.queue_wait_s)}</td><td class="num">${fmtS(r.ttft_s)}</td>
      <td class="num">${r.prompt_tokens}</td><td class="num">${r.completion_tokens}</td>
      <td class="num">${r.tokens_per_second ? r.tokens_per_second.toFixed(1) : '–'}</td><td class="num">${fmtS(r.duration_s)}</td>
    </tr>`)}
  </table></div></section>`;
}

function Timeline({ items }) {
  return html`<section id="timeline"><h2>Swaps and evictions</h2>${items.length ? html`<ul class="timeline">
    ${items.map((t) => html`<li data-kind=${t.kind}><span class="muted">${t.time.toLocaleTimeString()}</span> ${t.text}</li>`)}
  </ul>` : html`<p class="muted">No swaps yet.</p>`}</section>`;
}

function Policies({ policies }) {
  return html`<section id="policies"><h2>Policies</h2><table>
    <tr><th>Role</th><th>Policy</th><th>Active</th><th>Health</th><th class="num">Crashes</th><th class="num">Refused</th></tr>
    ${policies.map((p) => html`<tr><td>${p.role}</td><td>${p.name}${p.fallback ? ' (fallback)' : ''}</td>
      <td>${p.active ? 'yes' : 'no'}</td>
      <td class=${p.healthy === false ? 'err' : ''}>${p.healthy === false ? 'disabled' + (p.disabled_reason ? ': ' + p.disabled_reason : '') : 'healthy'}</td>
      <td class="num">${p.crashes}</td><td class="num">${p.counters ? p.counters.refused_effects : 0}</td></tr>`)}
  </table></section>`;
}

function Logs({ models, epoch }) {
  const [model, setModel] = useState('');
  const [text, setText] = useState('');
  const pre = useRef(null);
  useEffect(() => {
    const ctl = new AbortController();
    setText('');
    (async () => {
      try {
        const resp = await fetch(model ? '/logs/stream/' + encodeURIComponent(model) : '/logs/stream', { headers: authHeaders(), signal: ctl.signal });
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
  useEffect(() => { if (pre.current) pre.current.scrollTop = pre.current.scrollHeight; }, [text]);
  return html`<section class="wide" id="logs"><h2>Model server logs</h2>
    <select id="logs-model" value=${model} onChange=${(e) => setModel(e.target.value)}>
      <option value="">all models</option>${Object.keys(models).sort().map((m) => html`<option value=${m}>${m}</option>`)}
    </select>
    <pre class="logs" ref=${pre}>${text || html`<span class="muted">No output yet.</span>`}</pre></section>`;
}

const fmtDate = (t) => (t && !t.startsWith('0001') ? new Date(t).toLocaleString() : '–');
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELED']);

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

// JobDetail is one job: its attempts, a Cancel button and the latest
// attempt's output.
function JobDetail({ d, logs, cancel, close }) {
  return html`<div id="job-detail" data-job=${d.id}>
    <h3>${d.id} <span class=${'state job ' + d.state} data-state=${d.state}>${d.state}</span>
      <button id="job-cancel" disabled=${TERMINAL.has(d.state) || d.cancel_requested} onClick=${() => cancel(d.id)}>Cancel</button>
      <button id="job-close" onClick=${close}>Close</button></h3>
    ${d.error ? html`<p class="err">${d.error}</p>` : ''}
    <div class="scroll"><table id="job-attempts">
      <tr><th class="num">#</th><th>Submission id</th><th>Status</th><th>GPUs</th><th>Start</th><th>End</th><th>Failure</th></tr>
      ${(d.attempt_list || []).map((a) => html`<tr data-attempt=${a.attempt_no}>
        <td class="num">${a.attempt_no}</td><td>${a.submission_id}</td><td>${a.status || '–'}</td>
        <td>${(a.devices || []).join(', ') || '–'}</td><td>${fmtDate(a.started_at)}</td><td>${fmtDate(a.ended_at)}</td>
        <td class=${a.failure_kind ? 'err' : ''}>${a.failure_kind ? a.failure_kind + ': ' + (a.message || '') : '–'}</td></tr>`)}
    </table></div>
    <pre id="job-logs" class="logs">${logs || html`<span class="muted">No output yet.</span>`}</pre>
  </div>`;
}

// Jobs is the job queue (GET /api/jobs, with the job token), reloaded when
// it opens, when the token changes, on every job event (tick) and after a
// cancel.
function Jobs({ tick }) {
  const [epoch, setEpoch] = useState(0);
  const [list, setList] = useState([]);
  const [open, setOpen] = useState('');
  const [detail, setDetail] = useState(null);
  const [logs, setLogs] = useState('');
  const [err, setErr] = useState('');
  const [local, setLocal] = useState(0); // bumps after an action
  useEffect(() => {
    let live = true;
    (async () => {
      try {
        const l = await api('/api/jobs', { job: true });
        if (!live) return;
        setList(l.jobs || []);
        setErr('');
        if (open) {
          const d = await api('/api/jobs/' + encodeURIComponent(open), { job: true });
          if (!live) return;
          setDetail(d);
          const text = d.attempts ? await api('/api/jobs/' + encodeURIComponent(open) + '/logs', { job: true }).catch((e) => 'logs: ' + e.message) : '';
          if (live) setLogs(String(text));
        }
      } catch (e) {
        if (!live) return;
        setList([]);
        // 401: no token or a wrong one; 503: the jobs API is off (the server says how to turn it on).
        setErr(e.status === 401 ? `Enter the job token to see the job queue (${e.message}).` : e.message);
      }
    })();
    return () => { live = false; };
  }, [epoch, tick, open, local]);
  const cancel = async (id) => {
    try { await api('/api/jobs/' + encodeURIComponent(id) + '/cancel', { method: 'POST', job: true }); } catch (e) { setErr(`cancel ${id}: ${e.message}`); }
    setLocal((n) => n + 1);
  };
  const show = (id) => { setDetail(null); setLogs(''); setOpen(id); };
  return html`<section class="wide" id="jobs"><h2>Jobs</h2>
    <${JobTokenForm} onSaved=${() => setEpoch((e) => e + 1)} />
    ${err ? html`<p class="err" id="jobs-error">${err}</p>` : ''}
    ${list.length ? html`<div class="scroll"><table id="jobs-list">
      <tr><th>Job</th><th>State</th><th>Workload</th><th>Executor</th><th class="num">GPUs</th><th class="num">Attempts</th><th>Created</th></tr>
      ${list.map((j) => html`<tr data-job=${j.id} class=${j.id === open ? 'selected' : ''}>
        <td><button class="link" data-action="open" data-job=${j.id} onClick=${() => show(j.id)}>${j.name || j.id}</button></td>
        <td><span class=${'state job ' + j.state} data-state=${j.state} title=${j.error || ''}>${j.state}</span></td>
        <td>${j.workload}</td><td>${j.executor}</td>
        <td class="num">${j.job.nnodes}×${j.job.gpus_per_node}</td><td class="num">${j.attempts}</td><td>${fmtDate(j.created_at)}</td></tr>`)}
    </table></div>` : err ? '' : html`<p class="muted">No jobs.</p>`}
    ${open && detail ? html`<${JobDetail} d=${detail} logs=${logs} cancel=${cancel} close=${() => { setOpen(''); setDetail(null); }} />` : ''}
  </section>`;
}

function App() {
  const [s, dispatch] = useReducer(reducer, initial);
  const [epoch, setEpoch] = useState(0); // bumps when the key changes
  useEffect(() => {
    const ctl = new AbortController();
    const load = async () => {
      try {
        const [m, g, p] = await Promise.all([api('/api/models'), api('/api/gpus'), api('/api/policies')]);
        dispatch({ type: 'models', models: m.models });
        dispatch({ type: 'gpus', gpus: g.devices || [] });
        dispatch({ type: 'policies', policies: p.policies || [] });
        dispatch({ type: 'error', error: '' });
      } catch (e) { dispatch({ type: 'error', error: e.message }); }
      // The activity log's recent history (404 when it is off: live rows only).
      api(`/api/activity?limit=${MAX_ROWS}`).then((h) => dispatch({ type: 'history', rows: h.data || [] })).catch(() => {});
    };
    const gpus = () => api('/api/gpus').then((g) => dispatch({ type: 'gpus', gpus: g.devices || [] })).catch(() => {});
    const policies = () => api('/api/policies').then((p) => dispatch({ type: 'policies', policies: p.policies || [] })).catch(() => {});
    const note = (kind, text) => dispatch({ type: 'timeline', t: { kind, text, time: new Date() } });
    streamSSE('/api/events', ctl.signal, (type, d) => {
      switch (type) {
        case 'model': dispatch({ type: 'model', m: d }); break;
        case 'request': dispatch({ type: 'request', r: d }); break;
        case 'swap_start':
          note('swap', `swap → ${d.target}${d.evict && d.evict.length ? ', evicting ' + d.evict.join(', ') : ''}${d.cold ? ' (cold load)' : ''} · ${d.policy || ''}`);
          break;
        case 'swap_end':
          note('swap_end', d.error ? `${d.target} failed to load: ${d.error}` : `${d.target} ready after ${fmtS(d.seconds)}`);
          gpus();
          break;
        case 'eviction':
          note('eviction', `${d.model} stopped: ${d.reason}${d.by ? ' (for ' + d.by + ')' : ''}`);
          gpus();
          break;
        case 'policy_failed': note('policy', `${d.role} policy failed in ${d.event}: ${d.error}`); policies(); break;
        case 'policy_handover': note('policy', `${d.role} policy handed over`); policies(); break;
        case 'job': dispatch({ type: 'jobs' }); break;
        case 'reset': load(); dispatch({ type: 'jobs' }); break;
      }
    }, (conn) => { dispatch({ type: 'conn', conn }); if (conn === 'live') load(); });
    return () => ctl.abort();
  }, [epoch]);
  const act = async (what, model) => {
    try {
      await api(`/api/models/${what}/${encodeURIComponent(model)}`, { method: 'POST' });
    } catch (e) { dispatch({ type: 'error', error: `${what} ${model}: ${e.message}` }); }
  };
  return html`<header><h1>Loadout</h1><span class="conn muted" id="conn" data-conn=${s.conn}>${s.conn}</span>
      <${KeyForm} onSaved=${() => setEpoch((e) => e + 1)} /></header>
    ${s.error ? html`<p class="err" id="error" style="padding:0 1rem">${s.error}</p>` : ''}
    <main>
      <${Models} models=${s.models} act=${act} />
      <${GPUs} gpus=${s.gpus} models=${s.models} />
      <${Queue} models=${s.models} />
      <${Timeline} items=${s.timeline} />
      <${Policies} policies=${s.policies} />
      <${Activity} rows=${s.activity} />
      <${Logs} models=${s.models} epoch=${epoch} />
      <${Jobs} tick=${s.jobTick} />
    </main>`;
}

const root = document.getElementById('app');
root.textContent = ''; // the "Loading…" placeholder: render diffs against it, it does not replace it
render(html`<${App} />`, root);
