# The slotpool sandbox job: one task group "sandbox" whose count is the number of sandbox
# servers (containers); each serves `slots` isolated workspaces on a dynamic host port
# labelled "http" that maps to the server's port 8080 in the container.
#
#   export SANDBOX_TOKEN=$(head -c 24 /dev/urandom | base64 | tr '+/' '-_')
#   nomad job run -var image=slotpool-sandbox:local -var token="$SANDBOX_TOKEN" nomad/sandbox.nomad.hcl
#
# The token is required (no default): the server listens beyond loopback, and clients send
# it as their bearer token. Each slot's memory bound is an equal share of `memory` less the
# server's 128 MB, its disk half that share (keep the share >= 64 MB; `slotpool job render`
# refuses smaller ones with the numbers).
#
# The pool (slotpool --provisioner nomad) submits the same job through the HTTP API;
# `slotpool job render --format hcl` prints it for other option values. Keep the two in
# step: test/nomad/job-hcl.test.ts checks this file against src/nomad/job.ts.

variable "image" {
  type        = string
  description = "Docker image of the sandbox server (sandbox-image/Dockerfile; slotpool on its PATH)"
  default     = "slotpool-sandbox:local"
}

variable "seccomp_profile" {
  type        = string
  description = "Absolute path, on every Nomad client, of the container's seccomp profile: sandbox-image/seccomp.json (Docker's default plus pivot_root; the docker driver reads it on the client)"
}

variable "count" {
  type        = number
  description = "Number of sandbox servers"
  default     = 1
}

variable "slots" {
  type        = number
  description = "Slots (isolated workspaces) per sandbox server"
  default     = 4
}

variable "cpu" {
  type        = number
  description = "CPU per sandbox server, MHz"
  default     = 1000
}

variable "memory" {
  type        = number
  description = "Memory per sandbox server, MB: 128 for the server, the rest split evenly among the slots (each slot's memory bound; half of it its disk)"
  default     = 1024
}

variable "datacenters" {
  type        = list(string)
  description = "Datacenters to run in (dc1 is every agent's default; \"*\" needs Nomad >= 1.6)"
  default     = ["dc1"]
}

variable "image_disk_mb" {
  type        = number
  description = "Each server's sticky ephemeral disk for task images, MB (docs/images.md): their store's budget is 80 % of it"
  default     = 5120
}

variable "insecure_registries" {
  type        = list(string)
  description = "Registries of task images (HOST:PORT) that may answer plain HTTP; every other must speak TLS. Credentials: docs/nomad.md"
  default     = []
}

variable "token" {
  type        = string
  description = "Bearer token the sandbox servers require (required: they listen beyond loopback). For production, keep it in a Nomad Variable or Vault instead."
}

job "slotpool-sandbox" {
  type        = "service"
  datacenters = var.datacenters

  # bubblewrap and the slot isolation need Linux namespaces.
  constraint {
    attribute = "${attr.kernel.name}"
    operator  = "="
    value     = "linux"
  }

  # max_parallel = 0 means no update strategy, so Nomad creates no deployment and a scale
  # call is never refused with "job scaling blocked due to active deployment".
  update {
    max_parallel = 0
  }

  # Map syntax: meta keys contain dots. slotpool = "true" marks the job as slotpool's.
  meta = {
    "slotpool"       = "true"
    "slotpool.owner" = "nomad job run"
    "slotpool.slots" = "${var.slots}"
  }

  group "sandbox" {
    count = var.count

    network {
      port "http" {
        to = 8080
      }
    }

    # Restart in place twice within 30 min, then fail the allocation so it is rescheduled.
    restart {
      attempts = 2
      interval = "30m"
      delay    = "5s"
      mode     = "fail"
    }

    reschedule {
      unlimited      = true
      delay          = "5s"
      delay_function = "exponential"
      max_delay      = "1m"
    }

    # Task images live here (the server's data dir, $NOMAD_ALLOC_DIR/data, is on the node's own
    # filesystem; the container's overlayfs root cannot hold them). Sticky: a replacement on this
    # node keeps the images it had.
    ephemeral_disk {
      size   = var.image_disk_mb
      sticky = true
    }

    task "sandbox-server" {
      driver       = "docker"
      kill_timeout = "15s"

      config {
        image = var.image
        # Explicit, so args hold the whole command line whatever the image's ENTRYPOINT says;
        # tini (in the image) stays PID 1 and reaps what slot commands leave behind.
        entrypoint = ["tini", "-s", "--", "slotpool"]
        ports      = ["http"]
        args = concat([
          "sandbox-server", "--slots", "${var.slots}", "--host", "0.0.0.0", "--port", "8080",
          # Each slot's share of the allocation (see the top of this file).
          "--memory-mb", "${floor((var.memory - 128) / var.slots)}",
          "--disk-mb", "${floor((var.memory - 128) / var.slots / 2)}",
          # The task images' store budget: 80 % of its disk (ephemeral_disk below).
          "--image-budget-mb", "${floor(var.image_disk_mb * 0.8)}",
        ], flatten([for r in var.insecure_registries : ["--insecure-registry", r]]))
        # What a sandboxed server needs, and no more (no privileged; measured, see
        # docs/security-model.md): CAP_SYS_ADMIN for its own mount namespace (slot disks,
        # cgroups, uncovering Docker's masked /proc for bubblewrap); the client's docker plugin
        # must allow it (allow_caps, see nomad/dev.hcl).
        cap_add = ["sys_admin"]
        # The shipped profile: Docker's default plus pivot_root, which bubblewrap needs and
        # Docker's default refuses even with CAP_SYS_ADMIN (sandbox-image/seccomp-profile.md);
        # AppArmor's docker-default refuses mount where AppArmor is on.
        security_opt = ["seccomp=${var.seccomp_profile}", "apparmor=unconfined"]
        # Slots with network on are linked out by slirp4netns, which needs the host's TUN
        # device (docker passes none); drop this on nodes without the tun module.
        devices = [{ host_path = "/dev/net/tun", container_path = "/dev/net/tun" }]
      }

      # Plain env for development. In production render the token from a Nomad Variable
      # (template block with env = true) or from Vault.
      env = { SANDBOX_TOKEN = var.token }

      resources {
        cpu    = var.cpu
        memory = var.memory
      }
    }
  }
}
