package schedule_test

import (
	"testing"

	"github.com/personakit/persona/schedule"
	"github.com/personakit/persona/schedule/scheduletest"
)

func TestMemoryStoreConformance(t *testing.T) {
	scheduletest.Run(t, func(t *testing.T) schedule.Store { return scheduletest.NewMemory() })
}
