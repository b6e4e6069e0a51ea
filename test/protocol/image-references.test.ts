import { describe, expect, it } from "vitest";
import { ImageReferenceSchema, imageReferenceProblem, isImageUnavailable, parseImageReference, registryHostProblem } from "../../src/protocol/images.js";
import { ResetRequestSchema } from "../../src/protocol/sandbox.js";

/** Image references as skopeo names them (protocol/images.ts): what can name an image, and what skopeo is handed. */
describe("image references", () => {
  it("a registry reference is the default; a name without a host is Docker Hub's", () => {
    expect(parseImageReference("127.0.0.1:5000/swe/astropy:1234")).toMatchObject({ transport: "docker", skopeo: "docker://127.0.0.1:5000/swe/astropy:1234", registry: "127.0.0.1:5000", repository: "swe/astropy", tag: "1234" });
    expect(parseImageReference("python:3.12")).toMatchObject({ skopeo: "docker://docker.io/library/python:3.12", registry: "docker.io" });
    expect(parseImageReference("docker://localhost/x")).toMatchObject({ registry: "localhost", repository: "x" });
    const digest = `sha256:${"ab".repeat(32)}`;
    expect(parseImageReference(`registry.local/a/b@${digest}`)).toMatchObject({ digest, repository: "a/b" });
  });

  it("docker-daemon:, oci:DIR[:tag] and docker-archive:FILE name the node's engine and the server's files", () => {
    expect(parseImageReference("docker-daemon:busybox:latest")).toMatchObject({ transport: "docker-daemon", skopeo: "docker-daemon:busybox:latest" });
    expect(parseImageReference("oci:/srv/images/x:v1")).toMatchObject({ transport: "oci", path: "/srv/images/x", tag: "v1" });
    expect(parseImageReference("docker-archive:/tmp/x.tar")).toMatchObject({ transport: "docker-archive", path: "/tmp/x.tar" });
  });

  it("what cannot name an image says why", () => {
    const cases: Array<[string, RegExp]> = [
      ["", /is empty/],
      ["Upper/Case", /invalid repository name/],
      ["x:bad tag", /invalid tag/],
      ["a@sha256:abc", /invalid digest/],
      ["127.0.0.1:99999/x", /invalid registry port/],
      ["oci:relative/dir", /relative path/],
      ["docker-archive:/a/../b.tar", /'\.\.'/],
      ["dir:/some/dir", /transport 'dir:'/],
      ["containers-storage:x/y", /not supported/],
      ["docker-daemon:busybox", /no tag or digest/],
      ["a\nb", /control character/],
    ];
    for (const [ref, why] of cases) expect(imageReferenceProblem(ref), JSON.stringify(ref)).toMatch(why);
  });

  it("the schemas refuse a bad reference naming it, and a reset names the field image", () => {
    const bad = ResetRequestSchema.safeParse({ slot_id: "slot_0", image: "Bad/Ref" });
    expect(bad.success).toBe(false);
    expect(bad.error!.issues[0]!.path).toEqual(["image"]);
    expect(bad.error!.issues[0]!.message).toMatch(/image reference "Bad\/Ref"/);
    expect(ImageReferenceSchema.safeParse("ok/name:1").success).toBe(true);
  });

  it("--insecure-registry takes HOST[:PORT] only", () => {
    expect(registryHostProblem("127.0.0.1:5000")).toBeUndefined();
    expect(registryHostProblem("registry.local")).toBeUndefined();
    expect(registryHostProblem("http://x:5000")).toMatch(/not a registry HOST/);
    expect(registryHostProblem("x:70000")).toMatch(/invalid port/);
  });

  it("an image failure body is recognised by its code", () => {
    expect(isImageUnavailable({ error: "x", field: "image", code: "image_unavailable", reason: "not_found" })).toBe(true);
    expect(isImageUnavailable({ error: "x", field: "image" })).toBe(false);
  });
});
