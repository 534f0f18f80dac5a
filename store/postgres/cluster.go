package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/cluster"
)

// The store side of package cluster: a hold is a session-level advisory
// lock taken on a connection of its own (outside the pool), so that the
// server releases it as soon as that connection closes, also when the
// process is killed. The holder's state and the requests relayed to it
// (sends, and the calls of the channel's other capabilities) are rows
// (cluster_states, cluster_relay) announced with notifications. The hold
// needs a real session: a pooler in transaction mode (PgBouncer's
// default) between the processes and the server would break it.

var _ cluster.Store = (*DB)(nil)

// Notification topics of the cluster tables.
const (
	// topicClusterState: a name's published state or holder changed
	// (payload: the name).
	topicClusterState = "cluster.state"
	// topicRelay: a name got a pending request (payload: the name).
	topicRelay = "relay"
	// topicRelayDone: a relayed request finished (payload: its id).
	topicRelayDone = "relay.done"
)

// Timing of a hold's connection.
const (
	// holdPingEvery is how often the hold's connection is checked.
	holdPingEvery = time.Second
	// holdPingTimeout bounds one check; a check that fails or takes
	// longer ends the hold.
	holdPingTimeout = 3 * time.Second
	// holdStatementTimeout bounds every statement on the hold's
	// connection, so that a stuck one cannot keep the check waiting long.
	holdStatementTimeout = 10 * time.Second
)

// heldSQL is true when some session holds the advisory lock of the key
// in $1 (a bigint advisory lock shows in pg_locks as classid = its high
// and objid = its low 32 bits, objsubid 1).
const heldSQL = `EXISTS (SELECT 1 FROM pg_locks
	WHERE locktype = 'advisory' AND granted AND objsubid = 1
	  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
	  AND ((classid::int8 << 32) | objid::int8) = hashtextextended($1, 0))`

// holdKey returns the advisory-lock key of the hold on name.
func (d *DB) holdKey(name string) string { return d.lockKey("hold:" + name) }

// isClosed reports whether Close was called.
func (d *DB) isClosed() bool {
	select {
	case <-d.closed:
		return true
	default:
		return false
	}
}

// TryHold takes the hold on name if no process has it (see
// cluster.Store). The hold lives on a connection of its own, checked
// every second; it ends when that connection fails, when Release is
// called or when the DB is closed.
func (d *DB) TryHold(ctx context.Context, name string) (cluster.Holding, error) {
	if d.isClosed() {
		return nil, ErrClosed
	}
	key := d.holdKey(name)
	// The cheap look first: most calls come from processes that follow.
	var held bool
	if err := d.pool.QueryRow(ctx, `SELECT `+heldSQL, key).Scan(&held); err != nil {
		return nil, fmt.Errorf("postgres: try hold %s: %w", name, redact(err))
	}
	if held {
		return nil, nil
	}
	conn, err := pgx.ConnectConfig(ctx, d.cfg.ConnConfig.Copy())
	if err != nil {
		return nil, fmt.Errorf("postgres: try hold %s: connect: %w", name, redact(err))
	}
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Close(cctx)
		cancel()
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, key).Scan(&ok); err != nil {
		closeConn()
		return nil, fmt.Errorf("postgres: try hold %s: %w", name, redact(err))
	}
	if !ok {
		closeConn()
		return nil, nil
	}
	h := &holding{d: d, name: name, conn: conn, token: newHoldToken(),
		lost: make(chan struct{}), quit: make(chan struct{}), watched: make(chan struct{})}
	if err := h.takeOver(ctx); err != nil {
		closeConn() // releases the lock with the session
		return nil, fmt.Errorf("postgres: try hold %s: take over: %w", name, redact(err))
	}
	go h.watch()
	return h, nil
}

// newHoldToken returns a random id for one hold: the claims it makes carry
// it.
func newHoldToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// LoadState returns name's published state and whether it is held.
func (d *DB) LoadState(ctx context.Context, name string) (cluster.Status, error) {
	if d.isClosed() {
		return cluster.Status{}, ErrClosed
	}
	var s cluster.Status
	err := d.pool.QueryRow(ctx, `SELECT coalesce(s.platform, ''), coalesce(s.bot_id, ''), coalesce(s.connected, false),
			coalesce(s.online, false), coalesce(s.reason, ''), `+heldSQL+`
		FROM (VALUES (1)) AS one LEFT JOIN cluster_states s ON s.name = $2`, d.holdKey(name), name).
		Scan(&s.State.Platform, &s.State.BotID, &s.State.Connected, &s.State.Online, &s.State.Reason, &s.Held)
	if err != nil {
		return cluster.Status{}, fmt.Errorf("postgres: load cluster state %s: %w", name, redact(err))
	}
	return s, nil
}

// WatchState calls fn with the name whose state may have changed ("" for
// any).
func (d *DB) WatchState(fn func(name string)) (cancel func()) {
	return d.Subscribe(topicClusterState, fn)
}

// WatchRequests calls fn with the name that got a pending request (""
// for any).
func (d *DB) WatchRequests(fn func(name string)) (cancel func()) {
	return d.Subscribe(topicRelay, fn)
}

// WatchResults calls fn with the id of a relayed request that finished
// (0 for any).
func (d *DB) WatchResults(fn func(id int64)) (cancel func()) {
	return d.Subscribe(topicRelayDone, func(p string) {
		if p == "" {
			fn(0)
			return
		}
		if id, err := strconv.ParseInt(p, 10, 64); err == nil {
			fn(id)
		}
	})
}

// Request records a send for name's holder (see cluster.Store).
func (d *DB) Request(ctx context.Context, name string, out channel.Outgoing, opt cluster.RequestOptions) (cluster.Result, error) {
	payload, err := json.Marshal(out)
	if err != nil {
		return cluster.Result{}, fmt.Errorf("postgres: relay request: encode: %w", err)
	}
	var key *string
	if out.IdempotencyKey != "" {
		key = &out.IdempotencyKey
	}
	for range 3 { // the row found by key may be pruned in between: look again
		now := d.nowMs()
		pendingUntil := int64(0)
		if opt.Pending > 0 {
			pendingUntil = now + opt.Pending.Milliseconds()
		}
		var res cluster.Result
		found := false
		err := d.tx(ctx, "", func(tx pgx.Tx) error {
			err := tx.QueryRow(ctx, `INSERT INTO cluster_relay AS r
					(name, kind, idem_key, payload, status, requested_at, pending_until, deadline)
				VALUES ($1, 'send', $2, $3, 'pending', $4, $5, $6)
				ON CONFLICT (name, idem_key) WHERE idem_key IS NOT NULL DO UPDATE SET
					payload = EXCLUDED.payload, status = 'pending', requested_at = EXCLUDED.requested_at,
					pending_until = EXCLUDED.pending_until, deadline = EXCLUDED.deadline,
					claimed_by = '', claimed_at = 0, finished_at = 0, receipt = NULL, answer = NULL, body = NULL,
					error_class = '', error = NULL
				WHERE r.status IN ('failed', 'cancelled', 'unconfirmed')
				RETURNING id`, name, key, string(payload), now, pendingUntil, ms(opt.Deadline)).Scan(&res.ID)
			switch {
			case err == nil:
				res.Status, found = cluster.StatusPending, true
				return d.notify(ctx, tx, topicRelay, name)
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			// The same chunk was asked before and is pending, claimed or
			// done: wait for it, or take its receipt.
			res, err = scanRelayResult(tx.QueryRow(ctx, `SELECT `+relayResultCols+` FROM cluster_relay
				WHERE name = $1 AND idem_key = $2`, name, key))
			switch {
			case err == nil:
				found = true
			case errors.Is(err, pgx.ErrNoRows):
				err = nil
			}
			return err
		})
		if err != nil {
			return cluster.Result{}, fmt.Errorf("postgres: relay request: %w", redact(err))
		}
		if found {
			return res, nil
		}
	}
	return cluster.Result{}, errors.New("postgres: relay request: the request kept disappearing")
}

// Call records a call of kind for name's holder (see cluster.Store): a
// new row every time.
func (d *DB) Call(ctx context.Context, name string, kind cluster.RequestKind, payload []byte, opt cluster.RequestOptions) (cluster.Result, error) {
	if kind == cluster.KindSend || kind == "" {
		return cluster.Result{}, fmt.Errorf("postgres: relay call: %q is not a call", kind)
	}
	if d.isClosed() {
		return cluster.Result{}, ErrClosed
	}
	now := d.nowMs()
	pendingUntil := int64(0)
	if opt.Pending > 0 {
		pendingUntil = now + opt.Pending.Milliseconds()
	}
	res := cluster.Result{Status: cluster.StatusPending}
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO cluster_relay
				(name, kind, payload, status, requested_at, pending_until, deadline)
			VALUES ($1, $2, $3, 'pending', $4, $5, $6)
			RETURNING id`, name, string(kind), string(payload), now, pendingUntil, ms(opt.Deadline)).Scan(&res.ID); err != nil {
			return err
		}
		return d.notify(ctx, tx, topicRelay, name)
	})
	if err != nil {
		return cluster.Result{}, fmt.Errorf("postgres: relay %s call: %w", kind, redact(err))
	}
	return res, nil
}

// Result returns relayed request id's status and outcome.
func (d *DB) Result(ctx context.Context, id int64) (cluster.Result, error) {
	if d.isClosed() {
		return cluster.Result{}, ErrClosed
	}
	res, err := scanRelayResult(d.pool.QueryRow(ctx, `SELECT `+relayResultCols+` FROM cluster_relay WHERE id = $1`, id))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return cluster.Result{}, fmt.Errorf("postgres: relay result %d: %w", id, cluster.ErrUnknownRequest)
	case err != nil:
		return cluster.Result{}, fmt.Errorf("postgres: relay result %d: %w", id, redact(err))
	}
	return res, nil
}

// Withdraw cancels relayed request id if it is still pending.
func (d *DB) Withdraw(ctx context.Context, id int64) (bool, error) {
	done := false
	err := d.tx(ctx, "", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE cluster_relay SET status = 'cancelled', finished_at = $2
			WHERE id = $1 AND status = 'pending'`, id, d.nowMs())
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		done = true
		return d.notify(ctx, tx, topicRelayDone, strconv.FormatInt(id, 10))
	})
	if err != nil {
		return false, fmt.Errorf("postgres: relay withdraw %d: %w", id, redact(err))
	}
	return done, nil
}

// row is what pgx.Row and pgx.Rows have in common.
type row interface{ Scan(dest ...any) error }

// relayResultCols are the columns of cluster_relay scanRelayResult reads.
const relayResultCols = `id, status, receipt, answer, body, error`

// scanRelayResult reads relayResultCols of cluster_relay.
func scanRelayResult(r row) (cluster.Result, error) {
	var (
		res             cluster.Result
		status          string
		receipt, errRec *string
	)
	if err := r.Scan(&res.ID, &status, &receipt, &res.Answer, &res.Body, &errRec); err != nil {
		return cluster.Result{}, err
	}
	res.Status = cluster.RequestStatus(status)
	if receipt != nil {
		if err := json.Unmarshal([]byte(*receipt), &res.Receipt); err != nil {
			return cluster.Result{}, fmt.Errorf("decode receipt: %w", err)
		}
		res.Receipt.Time = res.Receipt.Time.UTC()
	}
	if errRec != nil {
		res.Error = &cluster.ErrorRecord{}
		if err := json.Unmarshal([]byte(*errRec), res.Error); err != nil {
			return cluster.Result{}, fmt.Errorf("decode error: %w", err)
		}
	}
	return res, nil
}

// holding is a hold: the advisory lock held by the session of conn.
type holding struct {
	d     *DB
	name  string
	token string

	mu    sync.Mutex // serializes the use of conn
	conn  *pgx.Conn
	ended bool // conn is closed or closing: the hold is over

	endOnce     sync.Once
	lost        chan struct{}
	releaseOnce sync.Once
	quit        chan struct{} // Release stops the watcher
	watched     chan struct{} // closed when the watcher returned
}

// Lost is closed when the hold ended.
func (h *holding) Lost() <-chan struct{} { return h.lost }

// end marks the hold over and closes its socket at once (the server then
// releases the lock), without waiting for a statement in progress: it is
// safe while another goroutine uses conn.
func (h *holding) end() {
	h.endOnce.Do(func() {
		if nc := h.conn.PgConn().Conn(); nc != nil {
			_ = nc.Close()
		}
		close(h.lost)
	})
}

// watch checks the connection every second until it fails, the DB is
// closed or Release is called.
func (h *holding) watch() {
	defer close(h.watched)
	t := time.NewTicker(holdPingEvery)
	defer t.Stop()
	for {
		select {
		case <-h.quit:
			return
		case <-h.d.closed:
			h.d.log.Info("cluster: store closed; giving the hold up", "name", h.name)
			h.end()
			h.closeConn()
			return
		case <-h.lost:
			h.closeConn()
			return
		case <-t.C:
		}
		if !h.mu.TryLock() {
			continue // a statement is running on it: that is a check too
		}
		err := error(nil)
		if h.ended {
			err = cluster.ErrLost
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), holdPingTimeout)
			err = h.conn.Ping(ctx)
			cancel()
		}
		h.mu.Unlock()
		if err != nil {
			h.d.log.Warn("cluster: the hold's connection failed; the hold is lost", "name", h.name, "err", redact(err))
			h.end()
			h.closeConn()
			return
		}
	}
}

// closeConn closes conn for good (the socket may be closed already).
func (h *holding) closeConn() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ended = true
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = h.conn.Close(ctx)
	cancel()
}

// onConn runs fn in a transaction on the hold's connection while the hold
// lasts (cluster.ErrLost after).
func (h *holding) onConn(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ended {
		return cluster.ErrLost
	}
	select {
	case <-h.lost:
		return cluster.ErrLost
	default:
	}
	// A statement cut off by its context breaks the connection, and the
	// lock with it: the caller's cancellation does not reach the
	// statement, only the timeout does.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdStatementTimeout)
	defer cancel()
	err := pgx.BeginFunc(ctx, h.conn, func(tx pgx.Tx) error { return fn(ctx, tx) })
	if err != nil && h.conn.IsClosed() {
		// The connection broke under the statement: the lock went with it.
		go h.end()
		return fmt.Errorf("%w (%w)", cluster.ErrLost, redact(err))
	}
	return err
}

// takeOver starts a hold: the requests the previous holder had claimed
// and not finished become unconfirmed, and the published state says "not
// connected" until this holder publishes its own.
func (h *holding) takeOver(ctx context.Context) error {
	return h.onConn(ctx, func(ctx context.Context, tx pgx.Tx) error {
		now := h.d.nowMs()
		rows, err := tx.Query(ctx, `UPDATE cluster_relay SET status = 'unconfirmed', finished_at = $2
			WHERE name = $1 AND status = 'claimed' RETURNING id`, h.name, now)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := h.d.notify(ctx, tx, topicRelayDone, strconv.FormatInt(id, 10)); err != nil {
				return err
			}
		}
		if len(ids) > 0 {
			h.d.log.Warn("cluster: requests the previous holder was serving are unconfirmed", "name", h.name, "count", len(ids))
		}
		if _, err := tx.Exec(ctx, `INSERT INTO cluster_states AS s (name, connected, online, reason, holder, updated_at)
			VALUES ($1, false, false, 'a new process took the connection over', $2, $3)
			ON CONFLICT (name) DO UPDATE SET connected = false, online = false, reason = EXCLUDED.reason,
				holder = EXCLUDED.holder, updated_at = EXCLUDED.updated_at`, h.name, h.token, now); err != nil {
			return err
		}
		return h.d.notify(ctx, tx, topicClusterState, h.name)
	})
}

// PublishState records st as name's state, while the hold lasts.
func (h *holding) PublishState(ctx context.Context, st channel.State) error {
	err := h.onConn(ctx, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO cluster_states AS s
				(name, platform, bot_id, connected, online, reason, holder, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
			ON CONFLICT (name) DO UPDATE SET platform = EXCLUDED.platform, bot_id = EXCLUDED.bot_id,
				connected = EXCLUDED.connected, online = EXCLUDED.online, reason = EXCLUDED.reason,
				holder = EXCLUDED.holder, updated_at = EXCLUDED.updated_at`,
			h.name, st.Platform, st.BotID, st.Connected, st.Online, st.Reason, h.token, h.d.nowMs()); err != nil {
			return err
		}
		return h.d.notify(ctx, tx, topicClusterState, h.name)
	})
	if err != nil {
		return fmt.Errorf("postgres: publish cluster state %s: %w", h.name, err)
	}
	return nil
}

// Claim takes up to limit pending requests, oldest first; the ones past
// their pending limit are cancelled instead.
func (h *holding) Claim(ctx context.Context, limit int) ([]cluster.Request, error) {
	var out []cluster.Request
	err := h.onConn(ctx, func(ctx context.Context, tx pgx.Tx) error {
		out = out[:0]
		now := h.d.nowMs()
		rows, err := tx.Query(ctx, `UPDATE cluster_relay SET status = 'cancelled', finished_at = $2
			WHERE name = $1 AND status = 'pending' AND pending_until <> 0 AND pending_until <= $2 RETURNING id`, h.name, now)
		if err != nil {
			return err
		}
		expired, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range expired {
			if err := h.d.notify(ctx, tx, topicRelayDone, strconv.FormatInt(id, 10)); err != nil {
				return err
			}
		}
		rows, err = tx.Query(ctx, `UPDATE cluster_relay AS r SET status = 'claimed', claimed_by = $2, claimed_at = $3
			FROM (SELECT id FROM cluster_relay WHERE name = $1 AND status = 'pending'
				ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED) AS p
			WHERE r.id = p.id
			RETURNING r.id, r.kind, r.payload, r.deadline`, h.name, h.token, now, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				req      cluster.Request
				kind     string
				payload  string
				deadline int64
			)
			if err := rows.Scan(&req.ID, &kind, &payload, &deadline); err != nil {
				return err
			}
			req.Kind = cluster.RequestKind(kind)
			if req.Kind == cluster.KindSend {
				if err := json.Unmarshal([]byte(payload), &req.Out); err != nil {
					return fmt.Errorf("decode relayed %s %d: %w", kind, req.ID, err)
				}
			} else {
				req.Payload = []byte(payload)
			}
			req.Deadline = fromMs(deadline)
			out = append(out, req)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: relay claim %s: %w", h.name, err)
	}
	slices.SortFunc(out, func(a, b cluster.Request) int { return compareInt64(a.ID, b.ID) })
	return out, nil
}

func compareInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Finish stores the outcome of a request this hold claimed. It works
// after the hold ended too, as long as no new holder has settled the
// request. A done send keeps res.Receipt, a done call res.Answer and
// res.Body.
func (h *holding) Finish(ctx context.Context, id int64, res cluster.Result) (bool, error) {
	var (
		receipt, errRec *string
		answer, body    []byte
	)
	switch res.Status {
	case cluster.StatusDone:
		b, err := json.Marshal(res.Receipt)
		if err != nil {
			return false, fmt.Errorf("postgres: relay finish %d: encode receipt: %w", id, err)
		}
		s := string(b)
		receipt = &s
		answer, body = res.Answer, res.Body
	case cluster.StatusFailed:
		if res.Error != nil {
			b, err := json.Marshal(res.Error)
			if err != nil {
				return false, fmt.Errorf("postgres: relay finish %d: encode error: %w", id, err)
			}
			s := string(b)
			errRec = &s
		}
	case cluster.StatusUnconfirmed, cluster.StatusCancelled:
	default:
		return false, fmt.Errorf("postgres: relay finish %d: %q is not an outcome", id, res.Status)
	}
	class := ""
	if res.Error != nil {
		class = res.Error.Class
	}
	done := false
	err := h.d.tx(ctx, "", func(tx pgx.Tx) error {
		// The row's kind picks the answer it keeps.
		tag, err := tx.Exec(ctx, `UPDATE cluster_relay SET status = $3,
				receipt = CASE WHEN kind = 'send' THEN $4::text END,
				answer = CASE WHEN kind <> 'send' THEN $5::bytea END, body = CASE WHEN kind <> 'send' THEN $6::bytea END,
				error_class = $7, error = $8, finished_at = $9
			WHERE id = $1 AND status = 'claimed' AND claimed_by = $2`,
			id, h.token, string(res.Status), receipt, answer, body, class, errRec, h.d.nowMs())
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		done = true
		return h.d.notify(ctx, tx, topicRelayDone, strconv.FormatInt(id, 10))
	})
	if err != nil {
		return false, fmt.Errorf("postgres: relay finish %d: %w", id, redact(err))
	}
	return done, nil
}

// Prune deletes name's finished requests older than age, and its
// finished calls older than cluster.ReadKeep (or age, when shorter).
func (h *holding) Prune(ctx context.Context, age time.Duration) error {
	now := h.d.now()
	cutoff := now.Add(-age).UnixMilli()
	readCutoff := now.Add(-min(age, cluster.ReadKeep)).UnixMilli()
	err := h.d.tx(ctx, "", func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM cluster_relay
			WHERE name = $1 AND status NOT IN ('pending', 'claimed') AND finished_at < $4
			  AND finished_at < CASE WHEN kind = 'send' THEN $2::bigint ELSE $3::bigint END`,
			h.name, cutoff, readCutoff, max(cutoff, readCutoff))
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: relay prune %s: %w", h.name, redact(err))
	}
	return nil
}

// Release publishes "not connected", unlocks and closes the connection.
func (h *holding) Release() error {
	var err error
	h.releaseOnce.Do(func() {
		close(h.quit)
		<-h.watched
		h.mu.Lock()
		defer h.mu.Unlock()
		if !h.ended {
			ctx, cancel := context.WithTimeout(context.Background(), holdStatementTimeout)
			defer cancel()
			err = pgx.BeginFunc(ctx, h.conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, `UPDATE cluster_states SET connected = false, online = false,
					reason = 'the holding process let the connection go', updated_at = $3
					WHERE name = $1 AND holder = $2`, h.name, h.token, h.d.nowMs()); err != nil {
					return err
				}
				if err := h.d.notify(ctx, tx, topicClusterState, h.name); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, h.d.holdKey(h.name))
				return err
			})
			h.ended = true
			cerr := h.conn.Close(ctx)
			if err == nil {
				err = cerr
			}
		}
		h.end()
		if err != nil {
			err = fmt.Errorf("postgres: release hold %s: %w", h.name, redact(err))
		}
	})
	return err
}
