import { chownSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, normalize } from "node:path";
import { bwrapArgs } from "../isolation/isolation.js";
import { filterArgs } from "../isolation/seccomp.js";
import { ulimitPrologue } from "../isolation/limits.js";
import { CappedOutput } from "../run/output.js";
import { RUN_EXTRA_FD, RUN_INPUT_FD, runProcess } from "../run/runner.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { SlotImages } from "../images/slot-images.js";
import type { StoredImage } from "../images/image-store.js";
import { IMAGE_TOOLS_BIN } from "../images/image-tools.js";
import { IMAGE_BASH, IMAGE_TOOLS_MOUNT } from "../isolation/isolation.js";

/** Where a build finds the template's files (a read-only staging dir), to copy into the image's working directory first. */
const FILES_MOUNT = "/run/slotpool-files";

/**
 * Builds a template on an image: the build's root is the image (slot_0's view of its layers,
 * slot_0's user namespace: the build runs as one of this server's slots would) with an upper
 * layer of the build's own, which becomes the template. The template's files are copied into
 * the image's WorkingDir (as its User, inside the sandbox), then the setup commands run there
 * one by one, like a `bash` call, without network, one deadline for the whole build. A reset
 * into the template mounts that layer between the image and the slot's own upper layer.
 */
export async function buildOnImage(
  svc: SlotHost,
  images: SlotImages,
  image: StoredImage,
  work: string,
  req: { setup: string[]; files: Record<string, string> },
  timeoutS: number,
): Promise<{ success: boolean; output: string; error: string }> {
  const slot = svc.slots[0]!;
  const tree = join(work, "tree");
  const root = join(work, "root");
  const files = join(work, "files");
  mkdirSync(root, { mode: 0o700 });
  mkdirSync(files, { mode: 0o755 });
  for (const [rel, content] of Object.entries(req.files)) {
    const p = join(files, normalize(rel));
    mkdirSync(dirname(p), { recursive: true, mode: 0o755 });
    writeFileSync(p, content, { mode: 0o644 });
  }
  const built = await images.mountBuildRoot(slot, image, root, tree, join(work, "ovl-work"));
  const r = image.runtime;
  const deadline = performance.now() + timeoutS * 1000;
  const outputs: string[] = [];
  try {
    const quote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;
    const steps = [
      ...(Object.keys(req.files).length > 0 ? [`${IMAGE_TOOLS_BIN}/mkdir -p ${quote(r.working_dir)} && ${IMAGE_TOOLS_BIN}/cp -R ${FILES_MOUNT}/. ${quote(r.working_dir)}/`] : []),
      ...req.setup,
    ];
    for (const [i, command] of steps.entries()) {
      const leftS = (deadline - performance.now()) / 1000;
      const label = i === 0 && steps.length > req.setup.length ? "files" : `setup[${i - (steps.length - req.setup.length)}]`;
      if (leftS <= 0) return { success: false, output: outputs.join(""), error: `timed out after ${timeoutS} s before ${label}` };
      const output = new CappedOutput({ cap: svc.limits.outputCap, workspaceDir: work, fileName: svc.newOutputName() });
      const imageRoot = { dir: root, env: r.env, workingDir: r.working_dir, uid: r.uid, gid: r.gid, toolsDir: images.toolsDir!, ...(built.usernsFd !== undefined ? { userns: { fd: RUN_EXTRA_FD } } : {}) };
      const args = [
        ...bwrapArgs({ workspaceDir: root, allowNetwork: false, image: imageRoot }),
        "--ro-bind", files, FILES_MOUNT,
        ...filterArgs(svc.bwrap.filter, RUN_INPUT_FD),
        "--",
        ...(r.uid !== 0 || r.gid !== 0 ? [`${IMAGE_TOOLS_MOUNT}/spawner`, "--exec-as", `${r.uid}:${r.gid}`, "--"] : []),
        IMAGE_BASH, "-c", `${ulimitPrologue(svc.limits, leftS)}cd -- ${quote(r.working_dir)} 2>/dev/null || cd /; ${command}`,
      ];
      const res = await runProcess({
        file: svc.bwrap.path!,
        args,
        ...(svc.bwrap.filter ? { input: svc.bwrap.filter.program } : {}),
        ...(built.usernsFd !== undefined ? { extraFds: [built.usernsFd] } : {}),
        ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
        timeoutMs: Math.max(1, leftS * 1000),
        output,
      });
      const text = output.text();
      outputs.push(`$ ${command}\n${text}${text.endsWith("\n") || text === "" ? "" : "\n"}`);
      const shown = command.length > 80 ? `${command.slice(0, 77)}...` : command;
      if (res.spawnError) return { success: false, output: outputs.join(""), error: `${label} \`${shown}\` could not start: ${res.spawnError}` };
      if (res.timedOut) return { success: false, output: outputs.join(""), error: `${label} \`${shown}\` timed out (the build's limit is ${timeoutS} s)` };
      if (res.exitCode !== 0) return { success: false, output: outputs.join(""), error: `${label} \`${shown}\` exited ${res.exitCode ?? res.signal}` };
    }
    return { success: true, output: outputs.join(""), error: "" };
  } finally {
    await built.unmount();
    // The tree's top directory is the root's: root's own, as the image's (its owner is the build's root).
    if (slot.owner) chownSync(tree, slot.owner.uid, slot.owner.gid);
  }
}
