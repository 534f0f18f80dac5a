package postgres

import "context"

// NotifyForTest sends a notification on topic.
func (d *DB) NotifyForTest(ctx context.Context, topic, payload string) error {
	return d.notify(ctx, d.pool, topic, payload)
}
