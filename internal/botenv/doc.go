// Package botenv reads the settings every reference bot (examples/onebot,
// examples/telegram) shares from the environment: the persona, the data
// directory, owners, aliases, the log level, the memory and agent switches
// and the model, with the offline demo model when no model is configured.
// It has no public contract.
package botenv
