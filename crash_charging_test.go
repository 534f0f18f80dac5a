package persona_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/personakit/persona/channel"
	"github.com/personakit/persona/inbound"
	"github.com/personakit/persona/outcome"
)

// The tests of this file check that a process death is charged only to
// the turn that died with it: claims wait in the claim-ahead buffer held
// in memory (stored when their turn starts), and an item whose lease was
// freed at Open (inbound.Lease.Orphaned) runs alone.

// runPoisonLives releases a poison message (a private message whose model
// call makes the process die, after grace) followed by innocent private
// messages in other chats, and runs up to 8 children (workers each) until
// every message has an outcome. It returns the records.
func runPoisonLives(t *testing.T, innocents, workers int, grace time.Duration) (poison channel.Event, others []channel.Event, recs map[string]inbound.Record) {
	t.Helper()
	if os.Getenv(crashChildEnv) != "" {
		t.Skip("child process")
	}
	if testing.Short() {
		t.Skip("spawns and kills child processes")
	}
	events := make([]channel.Event, 0, innocents+1)
	for i := range innocents + 1 {
		who := fmt.Sprintf("p%d", i)
		text := fmt.Sprintf("message %d", i)
		if i == 0 {
			text += ": poison"
		}
		events = append(events, channel.Event{Platform: "loop", BotID: "bot", Kind: channel.KindMessage,
			Chat: channel.Chat{Kind: channel.Private, ID: who}, MessageID: "m" + who, Sender: channel.Sender{ID: who, Name: who},
			Segments: []channel.Segment{channel.Text(text)}})
	}
	pl := newPlatform(t, events)
	all := make([]int, len(events))
	for i := range all {
		all[i] = i
	}
	pl.release(all...) // the poison first: it is claimed first
	noChunks := func(int) bool { return false }
	for run := range 8 {
		c := pl.startChild(run, crashModeEnv+"=poison", poisonDeathEnv+"=selfkill",
			poisonGraceEnv+"="+grace.String(), fmt.Sprintf("%s=%d", crashWorkersEnv, workers))
		deadline := time.Now().Add(30 * time.Second)
		for !c.exited() {
			if pl.settled(noChunks, true) { // every message has an outcome
				pl.stop(c)
				break
			}
			require.True(t, time.Now().Before(deadline), "child %d: %s", run, pl.logTail())
			time.Sleep(20 * time.Millisecond)
		}
		<-c.done
		pl.drained()
	}
	recs = pl.records()
	for _, ev := range events {
		r := recs[ev.Key()]
		t.Logf("%s: %d attempts, %s: %s", ev.Text(), r.Attempts, r.Outcome.Code, r.Outcome.Reason)
	}
	return events[0], events[1:], recs
}

// TestCrashChargesOnlyTurnsThatStarted: with one worker, the message
// behind the poison message waits in the claim-ahead buffer while the
// poison's turn kills the process, in every life. No stage ever ran on
// it, so no death is its attempt; it must be answered once the poison
// message is dropped.
//
// (When claims were stored as the dispatcher claimed ahead, the waiting
// message was charged by every death and dropped with the poison.)
func TestCrashChargesOnlyTurnsThatStarted(t *testing.T) {
	poison, others, recs := runPoisonLives(t, 1, 1, 200*time.Millisecond)
	require.Equal(t, inbound.DroppedRetriesExhausted, recs[poison.Key()].Outcome.Code)
	for _, ev := range others {
		require.Equal(t, outcome.Replied, recs[ev.Key()].Outcome.Code, "%s never ran a stage", ev.Text())
	}
}

// TestCrashPoisonSparesTurnsInFlight: a poison message that kills the
// process the moment its model call starts takes down the turns running
// beside it, in every life. They did not cause the deaths; they must be
// answered, not dropped with the poison.
//
// An item whose lease was freed at Open runs alone (inbound.Lease.Orphaned),
// so after the first death the poison is charged alone and the innocent
// message, an orphan too, runs alone and is answered.
func TestCrashPoisonSparesTurnsInFlight(t *testing.T) {
	poison, others, recs := runPoisonLives(t, 1, 2, 0)
	require.Equal(t, inbound.DroppedRetriesExhausted, recs[poison.Key()].Outcome.Code)
	for _, ev := range others {
		require.Equal(t, outcome.Replied, recs[ev.Key()].Outcome.Code, "%s only ran beside the poison", ev.Text())
	}
}
