package postgres

// StartPresenceForTest starts the DB's process registration and reaper
// (until Open does).
func (d *DB) StartPresenceForTest() { d.startPresence() }

// StopPresenceForTest stops them and closes the presence connection, as a
// dead process's would be (until Close does).
func (d *DB) StopPresenceForTest() { d.stopPresence() }

// PresenceBackendPIDForTest returns the backend pid of the presence
// connection, 0 while the DB is not registered.
func (d *DB) PresenceBackendPIDForTest() int { return d.presenceBackendPID() }
