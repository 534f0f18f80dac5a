package gatetest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/personakit/persona/gate"
)

// ErrInvalid is returned by Flags.SetFlag for a flag without a session key
// or a name (as the SQLite store does).
var ErrInvalid = errors.New("gatetest: flag needs a session key and a name")

type flagKey struct{ session, subject, name string }

// Flags is an in-memory gate.Flags. The zero value is ready to use.
type Flags struct {
	mu   sync.RWMutex
	m    map[flagKey]gate.Flag
	fail error
}

var (
	_ gate.Flags             = (*Flags)(nil)
	_ gate.SubjectFlagProber = (*Flags)(nil)
)

// NewFlags returns an empty Flags.
func NewFlags() *Flags { return &Flags{} }

// FailWith makes every later call return err (nil restores normal
// operation).
func (f *Flags) FailWith(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// SetFlag implements gate.Flags.
func (f *Flags) SetFlag(ctx context.Context, fl gate.Flag) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if fl.SessionKey == "" || fl.Name == "" {
		return ErrInvalid
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	if f.m == nil {
		f.m = make(map[flagKey]gate.Flag)
	}
	f.m[flagKey{fl.SessionKey, fl.Subject, fl.Name}] = fl
	return nil
}

// GetFlag implements gate.Flags. Expired flags are returned as stored.
func (f *Flags) GetFlag(ctx context.Context, sessionKey, subject, name string) (gate.Flag, bool, error) {
	if err := ctx.Err(); err != nil {
		return gate.Flag{}, false, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fail != nil {
		return gate.Flag{}, false, f.fail
	}
	fl, ok := f.m[flagKey{sessionKey, subject, name}]
	return fl, ok, nil
}

// HasSubjectFlags implements gate.SubjectFlagProber.
func (f *Flags) HasSubjectFlags(ctx context.Context, sessionKey, name string) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.fail != nil {
		return false, f.fail
	}
	for k := range f.m {
		if k.session == sessionKey && k.name == name && k.subject != "" {
			return true, nil
		}
	}
	return false, nil
}

// ClearFlag implements gate.Flags; clearing a missing flag is not an
// error.
func (f *Flags) ClearFlag(ctx context.Context, sessionKey, subject, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	delete(f.m, flagKey{sessionKey, subject, name})
	return nil
}

// All returns every stored flag, sorted by session key, subject and name.
func (f *Flags) All() []gate.Flag {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]gate.Flag, 0, len(f.m))
	for _, fl := range f.m {
		out = append(out, fl)
	}
	slices.SortFunc(out, func(a, b gate.Flag) int {
		return cmp.Or(cmp.Compare(a.SessionKey, b.SessionKey), cmp.Compare(a.Subject, b.Subject), cmp.Compare(a.Name, b.Name))
	})
	return out
}
