// The Switchyard dashboard: plain JavaScript, no framework, no build step,
// nothing loaded from outside the admin listener.
//
// Data: GET /api/v1/live seeds the last five minutes of samples (one a
// second), then GET /api/v1/events streams one `event: sample` a second.
// EventSource cannot send an Authorization header, so the stream is read
// with fetch() and a ReadableStream reader. Members are changed with
// PATCH /api/v1/pools/{pool}/members/{member}.
'use strict';

(function () {
  const API = '/api/v1';
  const TOKEN_KEY = 'switchyard.dashboard.token';
  const WINDOW_MS = 5 * 60 * 1000;
  // A chart spans at least this much time, so a fresh page is not a smear.
  const MIN_SPAN_MS = 60 * 1000;
  // No sample for this long: the stream is taken for dead and reopened.
  const STALL_MS = 5000;
  // An operator's change shows until a sample agrees, or this long.
  const OVERRIDE_MS = 4000;

  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) e.append(k);
    return e;
  };

  // ------------------------------------------------------------ state

  let token = localStorage.getItem(TOKEN_KEY); // null: never given
  let role = null;
  let samples = []; // oldest first
  let session = 0; // bumped on every (re)login: older loops stop
  let streamAbort = null;
  let lastSampleAt = 0;
  const overrides = new Map(); // "pool\u0000member" -> {state, admin, until}

  // ------------------------------------------------------------ formatting

  const num = (v, digits) =>
    v === null || v === undefined || Number.isNaN(v)
      ? '–'
      : Number(v).toLocaleString('en-US', {
          minimumFractionDigits: digits || 0,
          maximumFractionDigits: digits || 0,
        });
  const rate = (v) => (v === null || v === undefined ? '–' : v >= 100 ? num(v, 0) : num(v, 1));
  const msf = (v) => (v === null || v === undefined ? '–' : v >= 100 ? num(v, 0) : num(v, 2));
  function bytes(v, perSecond) {
    if (v === null || v === undefined) return '–';
    const units = ['B', 'KB', 'MB', 'GB', 'TB'];
    let i = 0;
    while (v >= 1000 && i < units.length - 1) {
      v /= 1000;
      i++;
    }
    return (i === 0 ? num(v, 0) : num(v, v >= 100 ? 0 : 1)) + ' ' + units[i] + (perSecond ? '/s' : '');
  }
  const ratio = (v) => (v === null || v === undefined ? '–' : num(v * 100, 1) + ' %');
  const clock = (ms) => new Date(ms).toLocaleTimeString('en-GB', { hour12: false });

  // ------------------------------------------------------------ API

  class Unauthorized extends Error {}

  function headers(extra) {
    const h = Object.assign({ Accept: 'application/json' }, extra || {});
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  }

  async function api(method, path, body) {
    const init = { method, headers: headers(), cache: 'no-store' };
    if (body !== undefined) {
      init.body = JSON.stringify(body);
      init.headers['Content-Type'] = 'application/json';
    }
    const r = await fetch(API + path, init);
    if (r.status === 401) throw new Unauthorized('the token was refused');
    let data = null;
    try {
      data = await r.json();
    } catch (e) {
      data = null;
    }
    if (!r.ok) {
      const why = data && data.error ? data.error : r.status + ' ' + r.statusText;
      throw new Error(why);
    }
    return data;
  }

  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

  // ------------------------------------------------------------ login

  function askToken(message) {
    session++;
    if (streamAbort) streamAbort.abort();
    setLink('signed out', '');
    $('who').textContent = 'not signed in';
    $('login-error').textContent = message || '';
    $('token').value = '';
    const d = $('login');
    if (!d.open) d.showModal();
    $('token').focus();
  }

  async function login(candidate) {
    const before = token;
    token = candidate;
    try {
      const who = await api('GET', '/whoami');
      localStorage.setItem(TOKEN_KEY, token);
      role = who.role;
      $('who').textContent = who.name + ' (' + who.role + ')';
      if ($('login').open) $('login').close();
      start();
    } catch (e) {
      if (e instanceof Unauthorized) {
        token = before;
        localStorage.removeItem(TOKEN_KEY);
        askToken(candidate ? 'That token was refused (401): check it and try again.' : 'The admin API wants a token.');
      } else {
        token = before;
        $('login-error').textContent = 'Cannot reach the admin API: ' + e.message;
        if (!$('login').open) {
          setLink('unreachable, retrying', 'down');
          setTimeout(() => login(candidate), 3000);
        }
      }
    }
  }

  $('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    login($('token').value.trim());
  });
  $('login').addEventListener('cancel', (ev) => ev.preventDefault());
  $('change-token').addEventListener('click', () => {
    localStorage.removeItem(TOKEN_KEY);
    token = null;
    askToken('');
  });

  // ------------------------------------------------------------ data flow

  function setLink(text, cls) {
    const l = $('link');
    l.textContent = text;
    l.className = 'link ' + (cls || '');
  }

  function addSample(s, draw) {
    const last = samples[samples.length - 1];
    if (last && s.time_ms <= last.time_ms) return;
    samples.push(s);
    const from = s.time_ms - WINDOW_MS;
    let drop = 0;
    while (drop < samples.length && samples[drop].time_ms < from) drop++;
    if (drop) samples = samples.slice(drop);
    lastSampleAt = Date.now();
    if (draw) render();
  }

  async function start() {
    const mine = ++session;
    if (streamAbort) streamAbort.abort();
    try {
      const seed = await api('GET', '/live');
      if (mine !== session) return;
      for (const s of seed || []) addSample(s, false);
      if (samples.length) render();
    } catch (e) {
      if (e instanceof Unauthorized) return askToken('The token was refused (401).');
    }
    stream(mine);
    watchdog(mine);
    cluster(mine);
    shield(mine);
  }

  // Cluster nodes (GET /api/v1/cluster every 5 s), on a cluster node only
  // (GET /api/v1/node says which cluster, or null).
  async function cluster(mine) {
    try {
      const me = await api('GET', '/node');
      if (!me || !me.cluster) {
        $('cluster-section').hidden = true;
        return;
      }
    } catch (e) {
      return;
    }
    while (mine === session) {
      let v = null;
      try {
        v = await api('GET', '/cluster');
      } catch (e) {
        if (e instanceof Unauthorized) return;
      }
      if (v) {
        $('cluster-section').hidden = false;
        $('cluster-prefix').textContent = v.prefix || '';
        syncRows(
          $('cluster').tBodies[0],
          (v.nodes || []).filter((n) => n.node),
          (n) => n.node,
          () => {
            const tr = el('tr', { 'data-testid': 'cluster-row' });
            tr.append(el('th', { scope: 'row' }), el('td', { class: 'n' }), el('td', { class: 'n' }), el('td'));
            return tr;
          },
          (tr, n) => {
            const err = n.error ? 'revision ' + n.error_revision + ': ' + n.error : '';
            cells(tr, [n.node, num(n.applied_revision), num(n.generation), err]);
            tr.cells[3].className = err ? 'bad' : '';
          },
          'no node has reported yet',
          4
        );
      }
      await sleep(5000);
    }
  }

  // The shield (GET /api/v1/shield every 5 s) while a global rule set or
  // XDP runs: its rules with their hits at accept and in XDP, where XDP
  // is attached, and the DDoS vectors that saw traffic, attacks first.
  async function shield(mine) {
    while (mine === session) {
      let v = null;
      try {
        v = await api('GET', '/shield');
      } catch (e) {
        if (e instanceof Unauthorized) return;
      }
      const g = v && v.global;
      $('shield-section').hidden = !g;
      if (g) renderShield(g);
      await sleep(5000);
    }
  }

  function renderShield(g) {
    const x = g.xdp;
    let where = 'at accept';
    if (x && (x.attached || []).length) {
      where = 'XDP on ' + x.attached.map((a) => a.interface + ' (' + a.mode + ')').join(', ');
    } else if (x && Object.keys(x.refused || {}).length) {
      where = 'at accept (XDP refused: ' + Object.keys(x.refused).join(', ') + ')';
    }
    $('shield-xdp').textContent = where;
    const rules = (g.rules || []).map((r, i) => ({ key: String(i), name: r.name, action: r.action, hits: r.hits, xdp: r.xdp_hits }));
    rules.push({ key: 'default', name: '(default)', action: g.default, hits: g.default_hits, xdp: g.xdp_default_hits });
    syncRows(
      $('shield-rules').tBodies[0],
      rules,
      (r) => r.key,
      (r) => {
        const tr = el('tr', { 'data-testid': 'shield-rule-row', 'data-rule': r.name });
        tr.append(el('th', { scope: 'row' }), el('td'), el('td', { class: 'n' }), el('td', { class: 'n' }));
        return tr;
      },
      (tr, r) => {
        tr.dataset.rule = r.name;
        tr.dataset.hits = r.hits;
        cells(tr, [r.name, r.action, num(r.hits), r.xdp == null ? '–' : num(r.xdp)]);
      },
      'no rules',
      4
    );
    const d = g.ddos;
    $('ddos').hidden = !d;
    if (!d) return;
    const seen = (d.vectors || [])
      .filter((v) => v.packets > 0 || v.detected)
      .sort((a, b) => (b.detected - a.detected) || (b.rate - a.rate) || (b.packets - a.packets));
    syncRows(
      $('ddos').tBodies[0],
      seen,
      (v) => v.name,
      (v) => {
        const tr = el('tr', { 'data-testid': 'ddos-row', 'data-vector': v.name });
        tr.append(el('th', { scope: 'row' }), el('td'), el('td', { class: 'n' }), el('td', { class: 'n' }), el('td', { class: 'n' }));
        return tr;
      },
      (tr, v) => {
        const since = v.detected_since ? new Date(v.detected_since * 1000).toLocaleTimeString() : '';
        const state = v.detected ? 'attack since ' + since : 'quiet';
        tr.dataset.detected = v.detected;
        cells(tr, [v.name, state, num(v.rate), num(v.threshold), num(v.dropped)]);
        tr.cells[1].className = v.detected ? 'bad' : '';
      },
      'no DDoS traffic seen',
      5
    );
  }

  // The event stream, reopened (after seeding again) when it ends or stalls.
  async function stream(mine) {
    let failures = 0;
    while (mine === session) {
      const ctl = new AbortController();
      streamAbort = ctl;
      try {
        const r = await fetch(API + '/events', {
          headers: headers({ Accept: 'text/event-stream' }),
          cache: 'no-store',
          signal: ctl.signal,
        });
        if (r.status === 401) return askToken('The token was refused (401).');
        if (!r.ok || !r.body) throw new Error('HTTP ' + r.status);
        setLink('live', 'live');
        failures = 0;
        const reader = r.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            frame(buf.slice(0, i));
            buf = buf.slice(i + 2);
          }
        }
      } catch (e) {
        if (mine !== session) return;
      }
      if (mine !== session) return;
      failures++;
      setLink('reconnecting…', 'down');
      await sleep(Math.min(1000 * failures, 5000));
      if (mine !== session) return;
      try {
        for (const s of (await api('GET', '/live')) || []) addSample(s, false);
      } catch (e) {
        if (e instanceof Unauthorized) return askToken('The token was refused (401).');
      }
    }
  }

  function frame(text) {
    let event = 'message';
    const data = [];
    for (const line of text.split('\n')) {
      if (line.startsWith(':')) continue;
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let value = c < 0 ? '' : line.slice(c + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'event') event = value;
      else if (field === 'data') data.push(value);
    }
    if (event !== 'sample' || !data.length) return;
    try {
      addSample(JSON.parse(data.join('\n')), true);
    } catch (e) {
      console.warn('dashboard: a sample that is not JSON', e);
    }
  }

  async function watchdog(mine) {
    while (mine === session) {
      await sleep(1000);
      if (mine !== session) return;
      if (lastSampleAt && Date.now() - lastSampleAt > STALL_MS && streamAbort) {
        lastSampleAt = Date.now();
        streamAbort.abort();
      }
    }
  }

  // ------------------------------------------------------------ charts

  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  // A line chart on a <canvas>: `series` are [{value(sample), color}];
  // `fmt` is 'number' or 'bytes' (the y axis labels).
  function drawChart(canvas, series, fmt) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth;
    const h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const left = 58;
    const right = 8;
    const top = 6;
    const bottom = 18;
    const pw = w - left - right;
    const ph = h - top - bottom;
    const last = samples[samples.length - 1];
    const t1 = last ? last.time_ms : Date.now();
    const span = Math.min(WINDOW_MS, Math.max(MIN_SPAN_MS, last ? t1 - samples[0].time_ms : 0));
    const t0 = t1 - span;
    let max = 0;
    for (const s of samples) for (const se of series) max = Math.max(max, se.value(s) || 0);
    const ymax = niceCeil(max);
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = css('--muted');
    g.strokeStyle = css('--line');
    g.lineWidth = 1;
    g.textBaseline = 'middle';
    g.textAlign = 'right';
    for (let i = 0; i <= 4; i++) {
      const y = Math.round(top + ph - (ph * i) / 4) + 0.5;
      g.beginPath();
      g.moveTo(left, y);
      g.lineTo(left + pw, y);
      g.stroke();
      g.fillText(axisLabel(fmt, (ymax * i) / 4, ymax), left - 6, y);
    }
    g.textAlign = 'center';
    g.textBaseline = 'top';
    const stepS = span > 2 * 60 * 1000 ? 60 : span > 60 * 1000 ? 30 : 15;
    for (let back = 0; back * 1000 <= span; back += stepS) {
      const x = left + pw - (back * 1000 * pw) / span;
      g.textAlign = back === 0 ? 'right' : x - left < 20 ? 'left' : 'center';
      g.fillText(back === 0 ? 'now' : '-' + (back >= 60 ? back / 60 + 'm' : back + 's'), x, top + ph + 4);
    }
    const xOf = (t) => left + ((t - t0) * pw) / span;
    const yOf = (v) => top + ph - ((v || 0) * ph) / ymax;
    g.lineWidth = 1.6;
    g.lineJoin = 'round';
    for (const se of series) {
      g.strokeStyle = css(se.color);
      g.beginPath();
      let prev = null;
      for (const s of samples) {
        if (s.time_ms < t0) continue;
        const x = xOf(s.time_ms);
        const y = yOf(se.value(s));
        // A gap of more than three periods (the page or the server was
        // away) is left blank rather than drawn as a straight line.
        if (prev === null || s.time_ms - prev > 3000) g.moveTo(x, y);
        else g.lineTo(x, y);
        prev = s.time_ms;
      }
      g.stroke();
    }
    canvas.dataset.points = String(samples.length);
  }

  // Axis labels: as many decimals as the scale needs, no more.
  function axisLabel(fmt, v, ymax) {
    if (fmt === 'bytes') return bytes(v, false);
    const step = ymax / 4;
    let digits = 0;
    while (digits < 3 && Math.abs(step * 10 ** digits - Math.round(step * 10 ** digits)) > 1e-9) digits++;
    return num(v, digits);
  }

  function niceCeil(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    // A quarter of each is a round number: the four grid lines are.
    for (const m of [1, 1.2, 1.6, 2, 2.4, 3, 4, 6, 8, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function drawCharts() {
    const t = (k) => (s) => (s.totals ? s.totals[k] : 0);
    drawChart($('chart-rps'), [{ value: t('requests_per_s'), color: '--rps' }], 'number');
    drawChart($('chart-eps'), [{ value: t('errors_per_s'), color: '--err' }], 'number');
    drawChart(
      $('chart-lat'),
      [
        { value: t('p50_ms'), color: '--p50' },
        { value: t('p99_ms'), color: '--p99' },
      ],
      'number'
    );
    drawChart(
      $('chart-bw'),
      [
        { value: t('bytes_in_per_s'), color: '--bin' },
        { value: t('bytes_out_per_s'), color: '--bout' },
      ],
      'bytes'
    );
  }

  // ------------------------------------------------------------ tables

  // Keeps one row per key, in order, updating rows in place (a button
  // under the pointer is not replaced between two samples).
  function syncRows(tbody, items, key, create, update, emptyText, cols) {
    const have = new Map();
    for (const tr of Array.from(tbody.rows)) {
      if (tr.dataset.key !== undefined) have.set(tr.dataset.key, tr);
      else tr.remove();
    }
    let at = 0;
    for (const it of items) {
      const k = key(it);
      let tr = have.get(k);
      if (!tr) {
        tr = create(it);
        tr.dataset.key = k;
      }
      have.delete(k);
      if (tbody.rows[at] !== tr) tbody.insertBefore(tr, tbody.rows[at] || null);
      update(tr, it);
      at++;
    }
    for (const tr of have.values()) tr.remove();
    if (!items.length) {
      tbody.append(el('tr', { class: 'empty' }, el('td', { colspan: String(cols), text: emptyText })));
    }
  }

  function cells(tr, values) {
    values.forEach((v, i) => {
      if (tr.cells[i].textContent !== v) tr.cells[i].textContent = v;
    });
  }

  function renderVservers(s) {
    syncRows(
      $('vservers').tBodies[0],
      s.vservers || [],
      (v) => v.name,
      (v) => {
        const tr = el('tr', { 'data-testid': 'vserver-row', 'data-vserver': v.name });
        tr.append(el('th', { scope: 'row' }));
        for (let i = 0; i < 10; i++) tr.append(el('td', { class: 'n' }));
        return tr;
      },
      (tr, v) =>
        cells(tr, [
          v.name,
          rate(v.requests_per_s),
          rate(v.errors_per_s),
          msf(v.p50_ms),
          msf(v.p99_ms),
          bytes(v.bytes_in_per_s, true),
          bytes(v.bytes_out_per_s, true),
          num(v.connections_active),
          num(v.requests_total),
          ratio(v.cache_hit_ratio),
          num(v.script_errors_total),
        ]),
      'no virtual servers',
      11
    );
  }

  const memberKey = (pool, addr) => pool + '\u0000' + addr;

  // What a sample says, unless an operator's change is newer than it.
  function memberState(pool, m) {
    const k = memberKey(pool, m.address);
    const o = overrides.get(k);
    if (o) {
      const agrees = m.admin_state ? m.admin_state === o.admin : m.state === o.state;
      if (agrees || Date.now() > o.until) overrides.delete(k);
      else return { state: o.state, admin: o.admin };
    }
    return { state: m.state, admin: m.admin_state || '' };
  }

  function renderPools(s) {
    const box = $('pools');
    const pools = s.pools || [];
    const seen = new Set();
    pools.forEach((p, i) => {
      seen.add(p.name);
      let sec = Array.from(box.children).find((c) => c.dataset.pool === p.name);
      if (!sec) {
        sec = el('div', { class: 'pool', 'data-pool': p.name, 'data-testid': 'pool' });
        const table = el('table');
        table.append(el('caption', { text: 'Pool ' + p.name }));
        const head = el('tr');
        for (const [t, n] of [
          ['Member', 0],
          ['State', 0],
          ['Weight', 1],
          ['Backup', 0],
          ['In flight', 1],
          ['Connections', 1],
          ['Req/s', 1],
          ['Requests', 1],
          ['Connect fails', 1],
          ['5xx', 1],
          ['Actions', 0],
        ]) {
          head.append(el('th', { scope: 'col', class: n ? 'n' : '', text: t }));
        }
        table.append(el('thead', {}, head), el('tbody'));
        sec.append(table);
      }
      if (box.children[i] !== sec) box.insertBefore(sec, box.children[i] || null);
      syncRows(
        sec.querySelector('tbody'),
        p.members || [],
        (m) => m.address,
        (m) => memberRow(p.name, m),
        (tr, m) => updateMember(tr, p.name, m),
        'no members',
        11
      );
    });
    for (const c of Array.from(box.children)) if (!seen.has(c.dataset.pool)) c.remove();
  }

  function memberRow(pool, m) {
    const tr = el('tr', { 'data-testid': 'member-row', 'data-pool': pool, 'data-member': m.address });
    tr.append(el('th', { scope: 'row', text: m.address }));
    const st = el('td');
    st.append(el('span', { class: 'state', 'data-testid': 'member-state' }));
    // Its last connects all failed: red, whatever its state says (a pool
    // without checks keeps such a member "up").
    const flag = el('span', { class: 'flag failing', 'data-testid': 'member-failing', text: 'failing' });
    flag.title = 'its last connects all failed';
    flag.hidden = true;
    st.append(' ', flag);
    tr.append(st);
    for (let i = 0; i < 8; i++) tr.append(el('td', { class: i === 1 ? '' : 'n' }));
    const acts = el('div', { class: 'actions' });
    for (const [label, want] of [
      ['Drain', 'draining'],
      ['Enable', 'enabled'],
      ['Disable', 'disabled'],
    ]) {
      const b = el('button', {
        type: 'button',
        'data-testid': label.toLowerCase(),
        'data-want': want,
        'aria-label': label + ' ' + m.address + ' in pool ' + pool,
        text: label,
      });
      b.addEventListener('click', () => change(tr, pool, m.address, want));
      acts.append(b);
    }
    tr.append(el('td', {}, acts));
    return tr;
  }

  // `label`: what the badge says ("up (no check)"), by default the state.
  function showState(tr, state, admin, label) {
    const badge = tr.querySelector('.state');
    const text = label || tr.dataset.label || state;
    if (badge.textContent !== text || !badge.classList.contains(state)) {
      badge.textContent = text;
      badge.className = 'state ' + state;
    }
    tr.dataset.label = text;
    tr.dataset.state = state;
    tr.dataset.adminState = admin;
    for (const b of tr.querySelectorAll('button')) {
      const want = b.dataset.want;
      const already = admin === want;
      b.disabled = role !== 'admin' || already || tr.dataset.busy === '1';
      b.title = role !== 'admin' ? 'needs a token with the admin role' : already ? 'already ' + want : '';
    }
  }

  function updateMember(tr, pool, m) {
    const { state, admin } = memberState(pool, m);
    const c = tr.cells;
    const vals = [
      num(m.weight),
      m.backup ? 'backup' : '',
      num(m.inflight),
      num(m.connections_active),
      rate(m.requests_per_s),
      num(m.requests_total),
      num(m.connect_failures),
      num(m.responses_5xx),
    ];
    vals.forEach((v, i) => {
      if (c[i + 2].textContent !== v) c[i + 2].textContent = v;
    });
    c[8].classList.toggle('bad', !!m.failing);
    c[9].classList.toggle('bad', m.responses_5xx > 0);
    const failing = !!m.failing;
    tr.querySelector('.flag.failing').hidden = !failing;
    tr.classList.toggle('failing', failing);
    tr.dataset.failing = failing ? '1' : '';
    showState(tr, state, admin, state === m.state && m.status ? m.status : state);
  }

  async function change(tr, pool, address, want) {
    const msg = $('action-msg');
    tr.dataset.busy = '1';
    showState(tr, tr.dataset.state || '', tr.dataset.adminState || '');
    msg.className = 'msg';
    msg.textContent = 'Asking to set ' + address + ' in pool ' + pool + ' to ' + want + '…';
    try {
      const path = '/pools/' + encodeURIComponent(pool) + '/members/' + encodeURIComponent(address);
      const m = await api('PATCH', path, { state: want });
      overrides.set(memberKey(pool, address), {
        state: m.state,
        admin: m.admin_state,
        until: Date.now() + OVERRIDE_MS,
      });
      tr.dataset.busy = '';
      showState(tr, m.state, m.admin_state, m.status);
      msg.textContent = address + ' in pool ' + pool + ' is now ' + m.state + ' (set to ' + m.admin_state + ').';
    } catch (e) {
      tr.dataset.busy = '';
      showState(tr, tr.dataset.state || '', tr.dataset.adminState || '');
      if (e instanceof Unauthorized) return askToken('The token was refused (401).');
      msg.className = 'msg error';
      msg.textContent = 'Could not set ' + address + ' to ' + want + ': ' + e.message;
    }
  }

  function renderCertificates(s) {
    syncRows(
      $('certificates').tBodies[0],
      s.certificates || [],
      (c) => c.vserver + '\u0000' + (c.names || []).join(',') + '\u0000' + c.not_after,
      () => {
        const tr = el('tr', { 'data-testid': 'certificate-row' });
        tr.append(el('th', { scope: 'row' }), el('td'), el('td'), el('td', { class: 'n' }), el('td'));
        return tr;
      },
      (tr, c) => {
        const ocsp = c.acme
          ? 'ACME ' + c.acme.challenge + (c.acme.last_error
            ? ', last order failed: ' + c.acme.last_error
            : c.acme.next_renewal ? ', renewal ' + c.acme.next_renewal : '')
          : !c.ocsp || !c.ocsp.stapled
          ? 'not stapled'
          : c.ocsp.error
            ? 'error: ' + c.ocsp.error
            : (c.ocsp.cert_status || c.ocsp.response_status || 'stapled') + (c.ocsp.expired ? ' (expired)' : '');
        cells(tr, [c.vserver, (c.names || []).join(', '), c.not_after || '', num(c.days_left), ocsp]);
        const d = tr.cells[3];
        d.className = 'n' + (c.days_left < 0 ? ' bad' : c.days_left < 30 ? ' warn' : '');
        d.title = c.days_left < 0 ? 'expired' : c.days_left < 30 ? 'expires in less than 30 days' : '';
        tr.dataset.daysLeft = String(c.days_left);
      },
      'no TLS certificates served',
      5
    );
  }

  function render() {
    const s = samples[samples.length - 1];
    if (!s) return;
    const t = s.totals || {};
    $('rps').textContent = rate(t.requests_per_s);
    $('eps').textContent = rate(t.errors_per_s);
    $('p50').textContent = msf(t.p50_ms) + ' ms';
    $('p99').textContent = msf(t.p99_ms) + ' ms';
    $('bin').textContent = bytes(t.bytes_in_per_s, true);
    $('bout').textContent = bytes(t.bytes_out_per_s, true);
    $('rps').dataset.value = String(t.requests_per_s);
    $('sample-time').textContent = 'at ' + clock(s.time_ms);
    $('sample-time').dataset.timeMs = String(s.time_ms);
    $('generation').textContent = 'configuration generation ' + s.generation + ' · ';
    const cache = s.cache || {};
    $('cache-objects').textContent = num(cache.objects);
    $('cache-bytes').textContent = bytes(cache.bytes, false);
    $('cache-ratio').textContent = ratio(t.cache_hit_ratio);
    renderVservers(s);
    renderPools(s);
    renderCertificates(s);
    drawCharts();
  }

  window.addEventListener('resize', () => drawCharts());

  // ------------------------------------------------------------ go

  // A kiosk link (a wall screen, a headless browser): `#token=T` signs in
  // once, as a typed token does (kept in localStorage when accepted), and
  // leaves the address bar and the history entry at once, as Grafana's
  // and Prometheus's kiosk links do.
  function tokenFromUrl() {
    if (!location.hash.startsWith('#')) return null;
    const t = new URLSearchParams(location.hash.slice(1)).get('token');
    if (t === null) return null;
    history.replaceState(null, '', location.pathname + location.search);
    return t.trim();
  }

  drawCharts();
  const linked = tokenFromUrl();
  if (linked !== null) login(linked);
  else if (token === null) askToken('');
  else login(token);
})();
