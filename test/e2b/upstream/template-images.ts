import { imagesMissing } from "../../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../../support/registry.js";
import { busyboxImage } from "../../support/test-images.js";

/**
 * The images E2B's template tests build on, from local files: they name Docker Hub's
 * `ubuntu:22.04` (`fromImage`) and `e2bdev/base` (`fromBaseImage()`, `fromTemplate('base')`),
 * which CI cannot reach. A registry on loopback serves the test busybox image (static busybox
 * and bash, test/support/test-images.ts) under both names, and the server fetches Docker Hub's
 * images from it (`--registry-mirror docker.io=<it>`): a stand-in for Ubuntu, with what the tests
 * run (`ls`, `cat`, `whoami`, `ln`, `test`). Undefined where images cannot be had here (the
 * template tests then fail, and the suites say why).
 */
export interface TemplateImages {
  /** e2b-server's flags for the mirror. */
  args: string[];
  stop(): Promise<void>;
}

export async function startTemplateImages(): Promise<TemplateImages | undefined> {
  if (imagesMissing !== undefined) return undefined;
  const registry: TestRegistry = await startRegistry();
  const layout = busyboxImage();
  await pushImage(layout, registry.host, "library/ubuntu:22.04");
  await pushImage(layout, registry.host, "e2bdev/base:latest");
  return { args: ["--insecure-registry", registry.host, "--registry-mirror", `docker.io=${registry.host}`], stop: () => registry.stop() };
}
