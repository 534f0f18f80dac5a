// The event center's page. Every piece of data goes into the DOM as text
// (textContent, text nodes, attributes), never as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'persona-events-token';
  const $ = (id) => document.getElementById(id);
  const rowsEl = $('message-rows');
  const state = {
    token: '',
    next: '',
    es: null,
    lastId: '',
    rows: new Map(),
    gen: 0,
    codes: new Set(),
    summaryTimer: 0,
  };

  class AuthError extends Error {}

  // api calls the JSON API with the bearer token.
  async function api(path, method) {
    const res = await fetch(path, {
      method: method || 'GET',
      headers: { Authorization: 'Bearer ' + state.token, Accept: 'application/json' },
      credentials: 'same-origin',
      cache: 'no-store',
    });
    if (res.status === 401) throw new AuthError('the token was refused');
    let body = null;
    if (res.status !== 204) body = await res.json().catch(() => null);
    if (!res.ok) throw new Error((body && body.error) || 'HTTP ' + res.status);
    return body;
  }

  // el builds an element with text children (strings become text nodes).
  function el(tag, cls, ...children) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.append(c instanceof Node ? c : String(c));
    }
    return e;
  }

  function notice(text) {
    $('notice').textContent = text || '';
  }

  function fmtTime(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return iso;
    const today = new Date();
    return d.toDateString() === today.toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
  }

  // ---- sign in and out ----

  function showLogin(message) {
    $('app').hidden = true;
    $('logout').hidden = true;
    $('trail').hidden = true;
    $('login').hidden = false;
    $('login-error').textContent = message || '';
    $('summary').replaceChildren();
    $('token').value = '';
    $('token').focus();
  }

  function signOut(message) {
    state.gen++;
    stopFeed();
    state.token = '';
    sessionStorage.removeItem(TOKEN_KEY);
    rowsEl.replaceChildren();
    state.rows.clear();
    showLogin(message);
  }

  async function start(token) {
    state.token = token;
    try {
      await api('api/session', 'POST');
    } catch (e) {
      if (e instanceof AuthError) {
        signOut('The token was refused.');
        return;
      }
      showLogin('The event center cannot be reached: ' + e.message);
      return;
    }
    sessionStorage.setItem(TOKEN_KEY, token);
    $('login').hidden = true;
    $('app').hidden = false;
    $('logout').hidden = false;
    loadCodes();
    loadSummary();
    await reload();
  }

  // ---- the listing ----

  function filterParams() {
    const p = new URLSearchParams();
    const add = (name, id) => {
      const v = $(id).value.trim();
      if (v) p.set(name, v);
    };
    add('code', 'filter-code');
    add('session', 'filter-session');
    add('sender', 'filter-sender');
    add('text', 'filter-text');
    return p;
  }

  function cell(name, text, title) {
    const td = el('td', name, text || '');
    td.dataset.label = name;
    if (title) td.title = title;
    return td;
  }

  function badge(m) {
    const b = el('span', 'badge', m.code || m.status);
    b.dataset.family = m.family || 'none';
    if (m.reason) b.title = m.reason;
    return b;
  }

  function row(m) {
    const tr = document.createElement('tr');
    tr.dataset.id = m.id;
    tr.dataset.code = m.code || '';
    tr.dataset.family = m.family || 'none';
    tr.dataset.status = m.status || '';
    tr.tabIndex = 0;
    const code = cell('code', '');
    code.append(badge(m));
    tr.append(cell('time', fmtTime(m.time), m.time), cell('chat', m.chat, m.session), cell('sender', m.sender),
      cell('text', m.text), code);
    tr.addEventListener('click', () => openTrail(m.id));
    tr.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') openTrail(m.id);
    });
    return tr;
  }

  // upsert shows m: in place when its row is there, else at the top (live)
  // or the bottom (an older page).
  function upsert(m, live) {
    const tr = row(m);
    const old = state.rows.get(m.id);
    if (old) {
      old.replaceWith(tr);
    } else if (live) {
      rowsEl.prepend(tr);
    } else {
      rowsEl.append(tr);
    }
    if (live) tr.classList.add('fresh');
    state.rows.set(m.id, tr);
    $('empty').hidden = true;
  }

  async function loadPage() {
    const gen = state.gen;
    const p = filterParams();
    if (state.next) p.set('before', state.next);
    let page;
    try {
      page = await api('api/messages?' + p.toString());
    } catch (e) {
      if (e instanceof AuthError) return signOut('The token is no longer accepted.');
      notice('Could not load messages: ' + e.message);
      return;
    }
    if (gen !== state.gen) return;
    notice('');
    for (const m of page.messages) upsert(m, false);
    state.next = page.next || '';
    $('more').hidden = !state.next;
    $('empty').hidden = state.rows.size > 0;
  }

  // reload starts the listing over: the live feed first, so that nothing
  // completed between the two is missed (rows are matched by id).
  async function reload() {
    state.gen++;
    state.next = '';
    state.rows.clear();
    rowsEl.replaceChildren();
    $('more').hidden = true;
    await openFeed(null);
    await loadPage();
  }

  // ---- the live feed ----

  function setLive(s) {
    const live = $('live');
    live.dataset.state = s;
    live.title = 'live feed: ' + s;
  }

  function stopFeed() {
    if (state.es) state.es.close();
    state.es = null;
    setLive('off');
  }

  // openFeed opens the live feed: after null starts at the newest record
  // now, a cursor (even "") resumes after it.
  function openFeed(after) {
    stopFeed();
    const p = filterParams();
    if (after !== null) p.set('after', after);
    const es = new EventSource('api/events?' + p.toString());
    state.es = es;
    state.lastId = after || '';
    setLive('connecting');
    const ready = new Promise((resolve) => {
      es.addEventListener('ready', (e) => {
        if (state.es !== es) return;
        state.lastId = e.lastEventId || state.lastId;
        setLive('open');
        resolve();
      });
      setTimeout(resolve, 2000);
    });
    es.onmessage = (e) => {
      if (state.es !== es) return;
      if (e.lastEventId) state.lastId = e.lastEventId;
      let m;
      try {
        m = JSON.parse(e.data);
      } catch (_) {
        return;
      }
      upsert(m, true);
      summarySoon();
    };
    es.onerror = () => {
      if (state.es !== es) return;
      if (es.readyState === EventSource.CLOSED) {
        setLive('closed');
        resumeFeed(es);
      } else {
        setLive('connecting');
      }
    };
    return ready;
  }

  // resumeFeed reopens a feed the server refused (its session cookie
  // expired): a new cookie, then the records after the last one seen.
  async function resumeFeed(es) {
    await new Promise((r) => setTimeout(r, 2000));
    if (state.es !== es) return;
    try {
      await api('api/session', 'POST');
    } catch (e) {
      if (e instanceof AuthError) return signOut('The token is no longer accepted.');
    }
    if (state.es !== es) return;
    openFeed(state.lastId);
  }

  // ---- summary and codes ----

  function summarySoon() {
    if (state.summaryTimer) return;
    state.summaryTimer = setTimeout(() => {
      state.summaryTimer = 0;
      loadSummary();
    }, 3000);
  }

  async function loadSummary() {
    let s;
    try {
      s = await api('api/summary');
    } catch (_) {
      return;
    }
    const fam = {};
    for (const o of s.outcomes) {
      fam[o.family] = (fam[o.family] || 0) + o.count;
      addCode(o.code);
    }
    const chips = [el('span', 'chip', '24 h: ' + s.total)];
    for (const f of ['replied', 'ignored', 'dropped', 'notice', 'other']) {
      if (!fam[f]) continue;
      const c = el('span', 'chip', f + ' ' + fam[f]);
      c.dataset.family = f;
      chips.push(c);
    }
    chips.push(el('span', 'chip', 'pending ' + s.pending));
    let input = 0;
    let cached = 0;
    let output = 0;
    for (const t of s.tokens) {
      input += t.input;
      cached += t.cached_input;
      output += t.output;
    }
    if (input || output) {
      const share = input ? Math.round((100 * cached) / input) : 0;
      chips.push(el('span', 'chip', 'tokens in ' + input + ' (' + share + '% cached), out ' + output));
    }
    $('summary').replaceChildren(...chips);
  }

  function addCode(code, meaning) {
    if (!code || state.codes.has(code)) return;
    state.codes.add(code);
    const o = el('option', null, code);
    o.value = code;
    if (meaning) o.title = meaning;
    $('filter-code').append(o);
  }

  async function loadCodes() {
    let c;
    try {
      c = await api('api/codes');
    } catch (_) {
      return;
    }
    for (const info of c.codes) addCode(info.code, info.meaning);
  }

  // ---- the trail ----

  function dl(pairs) {
    const d = el('dl');
    for (const [k, v, field] of pairs) {
      if (v === undefined || v === null || v === '' || (Array.isArray(v) && v.length === 0)) continue;
      const dd = el('dd', null, Array.isArray(v) ? v.join(', ') : String(v));
      if (field) dd.dataset.field = field;
      d.append(el('dt', null, k), dd);
    }
    return d;
  }

  function table(head, rows) {
    const t = el('table', 'mini');
    const tr = el('tr');
    for (const h of head) tr.append(el('th', null, h));
    t.append(el('thead', null, tr));
    const body = el('tbody');
    for (const r of rows) {
      const row = el('tr');
      for (const c of r) row.append(el('td', null, c === undefined || c === null ? '' : String(c)));
      body.append(row);
    }
    t.append(body);
    return t;
  }

  function section(title, ...content) {
    const s = el('section', 'trail-part', el('h3', null, title));
    for (const c of content) if (c) s.append(c);
    return s;
  }

  function pct(x) {
    return Math.round(100 * x) + '%';
  }

  function renderTrail(d) {
    const parts = [];
    const head = el('div', 'trail-code');
    head.append(badge(d), ' ', el('span', 'meaning', d.meaning || ''));
    parts.push(head);
    parts.push(dl([
      ['status', d.status, 'status'],
      ['code', d.code, 'code'],
      ['reason', d.reason, 'reason'],
      ['attempts', d.attempts, 'attempts'],
      ['last error', d.last_error, 'last_error'],
    ]));
    if (d.merged_into) {
      const b = el('button', 'link', 'merged into ' + d.merged_into);
      b.type = 'button';
      b.addEventListener('click', () => openTrail(d.merged_into));
      parts.push(b);
    }
    const text = el('p', 'full-text', d.text);
    text.dataset.field = 'text';
    parts.push(section('Message', dl([
      ['time', fmtTime(d.time)],
      ['chat', d.chat],
      ['session', d.session, 'session'],
      ['sender', d.sender, 'sender'],
      ['message id', d.message_id],
      ['source', d.source],
      ['kind', d.kind],
      ['priority', d.priority],
      ['history only', d.history_only ? 'yes' : ''],
    ]), text));
    const t = d.trail;
    if (t) {
      const decision = [dl([
        ['trigger', t.trigger, 'trigger'],
        ['gates passed', t.gates, 'gates'],
        ['stopped by', t.stopped_by, 'stopped_by'],
        ['command', t.command, 'command'],
        ['schedule', t.schedule],
      ])];
      if (t.router) {
        decision.push(el('h4', null, 'Router'), dl([
          ['directed', t.router.directed],
          ['chat-in score', t.router.chat_in],
          ['chat-in pass', t.router.chat_in_pass ? 'yes' : ''],
          ['reply', t.router.reply ? 'yes' : 'no', 'router_reply'],
          ['code', t.router.code],
          ['reason', t.router.reason],
        ]));
      }
      if (t.review && t.review.length) {
        decision.push(el('h4', null, 'Review'), table(['#', 'send', 'code', 'reason', 'notes'],
          t.review.map((r) => [r.generation, r.send ? 'yes' : 'no', r.code, r.reason,
            [r.rewritten ? 'rewritten' : '', r.regenerate ? 'regenerate' : ''].filter(Boolean).join(', ')])));
      }
      if (t.notes && t.notes.length) {
        const ul = el('ul');
        for (const n of t.notes) ul.append(el('li', null, n));
        decision.push(el('h4', null, 'Notes'), ul);
      }
      parts.push(section('Decision', ...decision));
    }
    const del = d.delivery || {};
    parts.push(section('Delivery', dl([
      ['stage', del.stage, 'stage'],
      ['sent ids', del.outbound_ids, 'outbound_ids'],
      ['ledger', del.slots_error],
    ]), del.slots && del.slots.length ? table(['chunk', 'state', 'platform ids', 'sent'],
      del.slots.map((s) => [s.n, s.state, (s.message_ids || []).join(', '), fmtTime(s.sent_at || s.intent_at)])) : null));
    if (d.timings && d.timings.length) {
      parts.push(section('Timings', table(['step', 'after enqueue', 'at'],
        d.timings.map((x) => [x.name, '+' + x.after, fmtTime(x.at)]))));
    }
    if (d.tokens && d.tokens.length) {
      parts.push(section('Tokens', table(['purpose', 'model', 'input', 'cached', 'output'],
        d.tokens.map((x) => [x.purpose, x.model, x.input, x.cached_input + ' (' + pct(x.cached_share) + ')', x.output]))));
    }
    $('trail-body').replaceChildren(...parts);
  }

  async function openTrail(id) {
    const panel = $('trail');
    panel.dataset.id = id;
    panel.hidden = false;
    document.body.classList.add('trail-open');
    $('trail-title').textContent = 'Trail';
    $('trail-body').replaceChildren(el('p', null, 'Loading…'));
    for (const tr of state.rows.values()) tr.classList.toggle('selected', tr.dataset.id === id);
    let d;
    try {
      d = await api('api/messages/' + encodeURIComponent(id));
    } catch (e) {
      if (e instanceof AuthError) return signOut('The token is no longer accepted.');
      if (panel.dataset.id === id) $('trail-body').replaceChildren(el('p', 'error', 'Could not load the trail: ' + e.message));
      return;
    }
    if (panel.dataset.id !== id) return;
    $('trail-title').textContent = d.chat + ' · ' + d.sender;
    renderTrail(d);
    panel.dataset.loaded = id;
  }

  function closeTrail() {
    const panel = $('trail');
    panel.hidden = true;
    delete panel.dataset.id;
    delete panel.dataset.loaded;
    document.body.classList.remove('trail-open');
    for (const tr of state.rows.values()) tr.classList.remove('selected');
  }

  // ---- wiring ----

  let debounce = 0;
  function filtersChanged(now) {
    clearTimeout(debounce);
    debounce = setTimeout(reload, now ? 0 : 350);
  }

  function init() {
    $('login-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const tok = $('token').value.trim();
      if (tok) start(tok);
    });
    $('logout').addEventListener('click', async () => {
      try {
        await api('api/session', 'DELETE');
      } catch (_) {
        // signed out here either way
      }
      signOut('');
    });
    $('filters').addEventListener('submit', (e) => {
      e.preventDefault();
      filtersChanged(true);
    });
    $('filter-code').addEventListener('change', () => filtersChanged(true));
    for (const id of ['filter-session', 'filter-sender', 'filter-text']) {
      $(id).addEventListener('input', () => filtersChanged(false));
    }
    $('filter-clear').addEventListener('click', () => {
      for (const id of ['filter-code', 'filter-session', 'filter-sender', 'filter-text']) $(id).value = '';
      filtersChanged(true);
    });
    $('more').addEventListener('click', loadPage);
    $('trail-close').addEventListener('click', closeTrail);
    document.addEventListener('keydown', (e) => {
      if (e.key === 'Escape' && !$('trail').hidden) closeTrail();
    });
    setInterval(() => {
      if (state.token && !$('app').hidden) loadSummary();
    }, 30000);

    // A token may come in the address's fragment (never sent to a server):
    // it is taken and removed from the address at once.
    let tok = '';
    const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (m) {
      tok = decodeURIComponent(m[1]);
      history.replaceState(null, '', location.pathname + location.search);
    }
    tok = tok || sessionStorage.getItem(TOKEN_KEY) || '';
    if (tok) start(tok);
    else showLogin('');
  }

  init();
})();
