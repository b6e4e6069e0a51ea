# Extra agent configuration for a local development cluster:
#
#   sudo nomad agent -dev -config nomad/dev.hcl
#
# (-dev already runs one server and one client on 127.0.0.1:4646 with datacenter "dc1";
# root is needed for the docker and exec drivers.)

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
    allow_caps = ["audit_write", "chown", "dac_override", "fowner", "fsetid", "kill", "mknod",
    "net_bind_service", "setfcap", "setgid", "setpcap", "setuid", "sys_chroot", "sys_admin"]
  }
}

# Optional: the raw_exec driver, for running the sandbox as an apptainer/singularity .sif
# (slotpool job render --driver raw_exec --image /path/to/slotpool-sandbox.sif).
plugin "raw_exec" {
  config {
    enabled = true
  }
}

client {
  # The dynamic port range the "http" port is taken from (Nomad's default).
  min_dynamic_port = 20000
  max_dynamic_port = 32000
}
