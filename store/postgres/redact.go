package postgres

import (
	"errors"
	"regexp"
)

// passwordInURL matches the password of a postgres:// URL and of a
// key=value connection string.
var passwordInURL = regexp.MustCompile(`(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*(@)|(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactString hides passwords in s.
func redactString(s string) string {
	return passwordInURL.ReplaceAllStringFunc(s, func(m string) string {
		sub := passwordInURL.FindStringSubmatch(m)
		if sub[1] != "" {
			return sub[1] + "xxxxx" + sub[2]
		}
		return sub[3] + "xxxxx"
	})
}

// redactedError keeps the chain of the error it wraps (errors.Is, As) but
// prints it with passwords hidden.
type redactedError struct{ err error }

func (e redactedError) Error() string { return redactString(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }

// redact wraps err so that its text names no password (pgx puts the
// connection string in some parse errors).
func redact(err error) error {
	if err == nil {
		return nil
	}
	var r redactedError
	if errors.As(err, &r) {
		return err
	}
	return redactedError{err}
}
