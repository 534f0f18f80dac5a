// Package pgtest gives tests a PostgreSQL database of their own: a fresh
// schema on the server named by PERSONA_TEST_DATABASE_URL, dropped when
// the test ends.
//
// Without that variable the tests that need PostgreSQL are skipped, unless
// PERSONA_TEST_POSTGRES=require (set by CI), which makes them fail: a CI
// run whose server did not start must not pass by skipping. .ci/postgres
// starts a throwaway server and prints its URL.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Environment variables read by the package.
const (
	// URLEnv names the server the tests use.
	URLEnv = "PERSONA_TEST_DATABASE_URL"
	// RequireEnv, set to "require", turns a missing or unreachable server
	// into a failure instead of a skip.
	RequireEnv = "PERSONA_TEST_POSTGRES"
)

// Server returns the server's URL, or skips (fails when required) t when
// none is configured.
func Server(t testing.TB) string {
	t.Helper()
	u := os.Getenv(URLEnv)
	if u == "" {
		if os.Getenv(RequireEnv) == "require" {
			t.Fatalf("%s is not set and %s=require: no PostgreSQL server to test against", URLEnv, RequireEnv)
		}
		t.Skipf("PostgreSQL tests need a server: set %s (.ci/postgres start DIR prints one)", URLEnv)
	}
	return u
}

// Schema creates a fresh schema on the test server and returns a URL whose
// connections use it (search_path). The schema is dropped when t ends.
func Schema(t testing.TB) string {
	t.Helper()
	base := Server(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "t_" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: connect to %s: %v", URLEnv, err)
	}
	defer func() { _ = conn.Close(context.Background()) }()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Logf("pgtest: drop schema %s: %v", name, err)
			return
		}
		defer func() { _ = c.Close(context.Background()) }()
		if _, err := c.Exec(ctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			t.Logf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return WithSchema(t, base, name)
}

// WithSchema returns base with its search_path set to schema.
func WithSchema(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("pgtest: %s is not a URL: %v", URLEnv, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
