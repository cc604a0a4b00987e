package mirror

// StopRenewing stops the lease's renewals, as a paused process would.
func (m *Mirror) StopRenewing() { m.lease.Stop() }
