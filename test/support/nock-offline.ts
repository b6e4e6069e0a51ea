import nock from "nock";
import { afterAll, afterEach, beforeAll, expect } from "vitest";

/**
 * nock for a contract suite: no real connection may escape (an unmocked request fails the
 * test), and every mocked request must have been made by the end of each test.
 */
export function useNockOffline(): void {
  beforeAll(() => {
    nock.disableNetConnect();
  });
  afterEach(() => {
    const pending = nock.pendingMocks();
    nock.cleanAll();
    expect(pending, "every mocked request was made").toEqual([]);
  });
  afterAll(() => {
    nock.enableNetConnect();
    nock.restore();
  });
}
