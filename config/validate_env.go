package config

// env checks the env section's keys for the environment's kind.
func (v *validator) env(c *Config) {
	e := c.Env
	if e.Kind == "http" {
		v.url("env.url", e.URL)
		v.positive("env.timeout_s", e.TimeoutS)
	} else if e.URL != "" {
		v.failf("env.url", "is for env.kind http (env.kind is %q)", e.Kind)
	}
	v.min("env.max_sessions", e.MaxSessions, 0)
	if e.Kind == "agent" && (len(e.Command) == 0 || e.Command[0] == "") {
		v.failf("env.command", "must name the agent program when env.kind is agent")
	} else if e.Kind != "agent" && len(e.Command) > 0 {
		v.failf("env.command", "is for env.kind agent (env.kind is %q)", e.Kind)
	}
}
