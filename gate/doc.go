// Package gate holds the deterministic checks that decide, without calling a
// model, whether an inbound message may be answered at all. They run before
// the router and generation, so a message they stop costs no model call.
//
// # Overview
//
// A [Gate] looks at a [Turn] and returns a [Verdict]: pass, or stop with an
// outcome code and a reason. A [Chain] runs gates in order and stops at the
// first stop, naming the gate that stopped in Verdict.Gate.
//
// [Compile] turns a [Config] — the bot's [Policy] and per-group
// [GroupPolicy] overrides, plain structs whose zero values mean the
// defaults — into [Rules]; [Rules.Chain] (or [Default]) returns the twelve
// gates G1–G12 in this order, the first stop winning:
//
//	G1  unavailable_group     ignored_unavailable_group      bot no longer in the group (a newer live event clears it)
//	G2  bot_enabled           ignored_bot_disabled           bot switched off
//	G3  group_enabled         ignored_group_disabled         group switch, disabled_groups, group allowlist
//	G4  bot_muted             ignored_bot_muted              muted in the group until a deadline
//	G5  model_quota           ignored_model_quota            daily calls per bot / group / user (owner exempt)
//	G6  response_suppression  ignored_response_suppression   sender (or chat) paused
//	G7  bot_chat              ignored_bot_chat_suppressed    bot senders: off / mentions (default) / on
//	G8  video                 ignored_video                  only a video
//	                          ignored_sticker_only           unprompted only: only stickers
//	G9  reply_gate            ignored_blocked_user, ignored_not_allowlisted, ignored_quiet_hours, ignored_member_level
//	G10 proactive_switch      ignored_proactive_off          unprompted only: both switches off, or no router
//	G11 stop_window           ignored_stop_requested         unprompted only: group stop in the last 10 min
//	G12 sampling              ignored_sampled_out            unprompted only: sampling rate (owner exempt)
//
// The reply gate (G9) runs owner bypass → blocked → allowlist → exempt →
// active hours → member level. Active hours are "HH:MM-HH:MM" in an IANA
// zone ([ParseHours]; overnight windows allowed). Outside them a direct
// message may get the configured quiet reply, at most once per hour per
// chat: the stopping Verdict then carries it in Reply, and the pipeline
// sends that text without a model. The member level comes from the event,
// else from the channel's [channel.MemberLookup] (Turn.Members) through a
// 10-minute cache; group owners and admins always pass; a level that stays
// unknown follows Policy.LevelUnknown (allow by default).
//
// A gate that cannot decide (a store read failed) returns a Verdict with
// Err set and Stop false; the chain stops there and the pipeline should
// retry the turn later.
//
// # State
//
// Session flags with deadlines live behind the [Flags] port, implemented
// by package store, so a restart keeps them. Other stages set them with
// the helpers, so that everyone uses the same names: [OpenStopWindow] (or
// [Rules.OpenStopWindow]), [Suppress], [MarkMuted], [MarkUnavailable] and
// [ClearUnavailable]; the router's chat cooldown uses [FlagChatCooldown].
// [FlagCache] keeps reads in memory in front of the store (write-through);
// route every write of the process through it.
//
// Model-call counters live behind the [Quota] port ([NewFlagQuota] keeps
// them in Flags). The gate only reads them; the pipeline calls
// [Rules.RecordModelCall] for each model call it makes.
//
// # Wiring
//
// A pipeline compiles the config once, runs the chain for every claimed
// message and uses the same Rules for the router's settings:
//
//	rules, err := gate.Compile(gate.Config{Policy: p, Groups: g, Flags: flags, Quota: gate.NewFlagQuota(flags)})
//	chain := rules.Chain()                  // embedders may Insert, Remove or Replace by name
//	v := chain.Check(ctx, &gate.Turn{Event: ev, SessionKey: key, Direct: kind != "", Trigger: kind,
//		Owner: owner, Now: now, Members: lookup})
//	// route.Config{Settings: rules.Proactive, Flags: flags, …}
//
// # Implementing
//
// Implement Gate, or wrap a function with [New]. Insert, remove or replace
// gates in a Chain in code by their names (the Name… constants).
// Implement Flags for another store and check it with
// gatetest.RunFlags.
//
// # Concurrency
//
// Gates are called from many workers at once and must be safe for
// concurrent use; Rules, FlagCache and FlagQuota are.
package gate
