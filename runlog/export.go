package runlog

// Clone returns a deep copy of the group, safe to read after the lock of
// Log.View is released.
func (g *Group) Clone() *Group { return g.clone() }
