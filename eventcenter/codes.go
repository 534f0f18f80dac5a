package eventcenter

import (
	"github.com/personakit/persona/outcome"
)

// The outcome families the page colours codes by (outcome.Family).
const (
	FamilyReplied = outcome.FamilyReplied
	FamilyIgnored = outcome.FamilyIgnored
	FamilyDropped = outcome.FamilyDropped
	FamilyNotice  = outcome.FamilyNotice
	// FamilyOther is every other code: merges, supersessions, backfill.
	FamilyOther = outcome.FamilyOther
)

// CodeInfo describes one outcome code as the event center shows it.
type CodeInfo struct {
	// Code is the outcome code.
	Code outcome.Code `json:"code"`
	// Owner is the package that declares it ("outcome" for the pipeline's
	// own wiring).
	Owner string `json:"owner"`
	// Family is the code's family (FamilyReplied, ...), see Family.
	Family string `json:"family"`
	// Meaning says in a sentence when a message ends with the code.
	Meaning string `json:"meaning"`
}

// Codes returns every outcome code persona declares, with its owner, family
// and meaning (see outcome.Catalogue). Codes of an embedder's own stages are
// not in it; the center shows them with an empty meaning.
func Codes() []CodeInfo {
	cat := outcome.Catalogue()
	out := make([]CodeInfo, len(cat))
	for i, c := range cat {
		out[i] = CodeInfo{Code: c.Code, Owner: c.Owner, Family: Family(c.Code), Meaning: c.Meaning}
	}
	return out
}

// Meaning returns what the code means, "" for a code persona does not
// declare.
func Meaning(code outcome.Code) string { return outcome.Meaning(code) }

// Family returns the family of an outcome code (see outcome.Family).
func Family(code outcome.Code) string { return outcome.Family(code) }
