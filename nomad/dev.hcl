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

    # The sandbox job's docker task may set privileged = true (slotpool job render
    # --privileged) when security_opt alone does not let bubblewrap create namespaces.
    allow_privileged = true
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
