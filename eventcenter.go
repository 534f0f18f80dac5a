package persona

import (
	"errors"
	"slices"

	"github.com/personakit/persona/eventcenter"
	"github.com/personakit/persona/inbound"
)

// EventCenter returns the event center over this pipeline's records: an
// http.Handler with the page, the JSON API and the live feed (see package
// eventcenter). cfg needs only Token; Records, Ledger, Clock and Logger
// default to the pipeline's, and the pipeline's Secrets are masked besides
// cfg.Secrets. The center is woken as each outcome is recorded, so the
// live feed shows it at once. Mount it in any server, and close it (or
// register its Close with http.Server.RegisterOnShutdown) when done.
func (p *Pipeline) EventCenter(cfg eventcenter.Config) (*eventcenter.Center, error) {
	if cfg.Records == nil {
		if p.records == nil {
			return nil, errors.New("persona: the event center needs a queue that lists its records (the default store does)")
		}
		cfg.Records = p.records
	}
	if cfg.Ledger == nil {
		if sr, ok := p.opt.Ledger.(eventcenter.SlotReader); ok {
			cfg.Ledger = sr
		}
	}
	cfg.Secrets = append(slices.Clone(p.opt.Secrets), cfg.Secrets...)
	if cfg.Clock == nil {
		cfg.Clock = p.clk
	}
	if cfg.Logger == nil {
		cfg.Logger = p.log
	}
	c, err := eventcenter.New(cfg)
	if err != nil {
		return nil, err
	}
	p.listen(func(string, inbound.Outcome) { c.Wake() })
	return c, nil
}

// listen adds a function called (after Options.OnOutcome) for every
// terminal record.
func (p *Pipeline) listen(f func(id string, o inbound.Outcome)) {
	p.listenMu.Lock()
	defer p.listenMu.Unlock()
	p.listeners = append(slices.Clip(p.listeners), f)
}
