//go:build persona_nostore

package main

import (
	"context"
	"errors"
)

// useStore is unavailable: this build does not import the store.
func useStore(context.Context, string) (func() error, error) {
	return nil, errors.New("built with persona_nostore: the store is not imported")
}
