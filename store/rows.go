package store

import (
	"context"
	"fmt"
)

// selectAll runs a read query on the read pool and scans every row with
// scan; what names the query in errors.
func selectAll[T any](ctx context.Context, d *DB, what string, scan func(sc interface{ Scan(...any) error }) (T, error), q string, args ...any) ([]T, error) {
	rows, err := d.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	defer func() { _ = rows.Close() }()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("store: %s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: %s: %w", what, err)
	}
	return out, nil
}
