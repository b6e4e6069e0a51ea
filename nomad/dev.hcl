# Extra agent configuration for a local development cluster:
#
#   sudo nomad agent -dev -config nomad/dev.hcl
#
# (-dev already runs one server and one client on 127.0.0.1:4646 with datacenter "dc1",
# the job's default; root is needed for the docker and exec drivers. Tested against a real
# Nomad 1.1.2 agent by test/engines/.)

plugin "docker" {
  config {
    # Use images built locally (docker build -t slotpool-sandbox:local ...) instead of
    # pulling them: never garbage-collect them and let tags like ":local" resolve locally.
    gc {
      image = false
    }

    # The sandbox job's docker task adds CAP_SYS_ADMIN (cap_add = ["sys_admin"]): Nomad's
    # default allow_caps (below, without sys_admin) plus it. Nomad 1.1 and current Nomad
    # (1.9/1.10) both take this list; the job needs no privileged container (slotpool job
    # render --privileged would also need allow_privileged = true here).
    # sys_ptrace: only for a job that asks for it (pool.nomad.capAdd): task images under the
    # docker driver need it (docs/nomad.md, "Task images"); the default job does not add it.
    allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
    "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot", "sys_admin", "sys_ptrace"]
  }
}

# The raw_exec driver: local development without an image (the host's own slotpool,
# `--driver raw_exec` with no image), or an apptainer/singularity .sif
# (slotpool job render --driver raw_exec --image /path/to/slotpool-sandbox.sif).
plugin "raw_exec" {
  config {
    enabled = true
  }
}

# Only fields that Nomad 1.1 (the agent CI runs) and current Nomad (1.9/1.10) both document:
# e.g. client.min_dynamic_port/max_dynamic_port came in 1.2 and make a 1.1 agent refuse the
# file; the "http" port comes from the default dynamic range (20000-32000) anyway.
