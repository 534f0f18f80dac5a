package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

	"github.com/jackc/pgx/v5"

	"github.com/personakit/persona/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one embedded schema step.
type migration = migrations.Migration

// loadMigrations reads the embedded migrations.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	ms, err := migrations.Load(fsys, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return ms, nil
}

// SchemaVersion is the schema version this build migrates to.
func SchemaVersion() int {
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return 0
	}
	return len(ms)
}

// lockKey returns the advisory-lock key of name in this store's schema:
// stores in different schemas of one database do not share locks.
func (d *DB) lockKey(name string) string { return d.schema + ":" + name }

// migrate applies the missing migrations in one transaction that holds a
// transaction-level advisory lock, so processes opening the database at
// the same time apply each migration once and the others wait and find
// the schema up to date.
func (d *DB) migrate(ctx context.Context) error {
	ms, err := loadMigrations(migrationFS)
	if err != nil {
		return err
	}
	err = d.tx(ctx, "", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, d.lockKey("migrate")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS persona_migrations (
			version    integer PRIMARY KEY,
			name       text    NOT NULL,
			applied_at bigint  NOT NULL)`); err != nil {
			return err
		}
		var have int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM persona_migrations`).Scan(&have); err != nil {
			return err
		}
		if have > len(ms) {
			return fmt.Errorf("%w (database at version %d, this build knows %d)", ErrSchemaTooNew, have, len(ms))
		}
		for _, m := range ms[have:] {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return fmt.Errorf("postgres: migration %s: %w", m.Name, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO persona_migrations (version, name, applied_at) VALUES ($1, $2, $3)`,
				m.Version, m.Name, d.nowMs()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}
