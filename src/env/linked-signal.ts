import { setMaxListeners } from "node:events";

/**
 * A run's one AbortSignal reaches every trajectory, and each trajectory's calls (model
 * requests, tool calls, slot acquisition) listen on it: with more than 10 trajectories in
 * flight Node warns "MaxListenersExceededWarning: Possible EventTarget memory leak", though
 * every listener is removed. The cause is one listener per call on one signal; the fix is
 * one listener per run signal that fans the abort out to each trajectory's own signal, on
 * which that trajectory's few calls listen.
 */
const fanOuts = new WeakMap<AbortSignal, Set<AbortController>>();

export interface LinkedSignal {
  /** Aborts when the run's signal does (with its reason). */
  readonly signal: AbortSignal;
  /** Unlinks it from the run's signal; call when the trajectory is done. */
  release(): void;
}

/** `listeners`: how many calls may listen on the linked signal at once (a branching tree's branches), when more than Node's 10. */
export function linkedSignal(parent: AbortSignal, listeners = 0): LinkedSignal {
  const controller = new AbortController();
  if (listeners > 10) setMaxListeners(listeners, controller.signal);
  if (parent.aborted) {
    controller.abort(parent.reason);
    return { signal: controller.signal, release: () => {} };
  }
  let children = fanOuts.get(parent);
  if (!children) {
    const set = new Set<AbortController>();
    children = set;
    fanOuts.set(parent, set);
    parent.addEventListener(
      "abort",
      () => {
        for (const c of set) c.abort(parent.reason);
        set.clear();
      },
      { once: true },
    );
  }
  children.add(controller);
  const set = children;
  return { signal: controller.signal, release: () => set.delete(controller) };
}
