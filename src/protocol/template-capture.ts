import { z } from "zod";
import { SlotIdSchema, TemplateNameSchema, TemplateInfoSchema } from "./sandbox.js";

/**
 * A template made of a slot's files as they are now (sandbox server routes; E2B's snapshots,
 * src/e2b/snapshots.ts, are built on them):
 *
 *   POST /templates/capture {slot_id, name} → {template: TemplateInfo}
 *   POST /templates/delete  {name}          → {deleted: bool}
 *
 * What is captured: a slot whose root is the server's system, its workspace (/workspace, E2B's
 * /home/user; not /tmp); a slot whose root is an image, everything it changed anywhere in that
 * root (its upper layer: the template is a template on that image, with those changes as its
 * layer). The slot's processes are frozen for the copy (the capture is consistent; they go on
 * after) and keep running; memory and processes are not captured. A reset into the template
 * (`POST /reset {"template": name}`) gives any slot of this server a copy-on-write view of it.
 * A captured template lives in this server's template store until deleted (never evicted for
 * the budget: a capture that does not fit is refused, 507); a name already stored is replaced
 * (slots using the old version keep it until their reset). Deleting drops it once no slot
 * uses it. Answers: 404 unknown slot or template, 409 a slot being reset or paused by a
 * client, 507 over the template budget.
 */
export const TemplateCaptureRequestSchema = z.object({ slot_id: SlotIdSchema, name: TemplateNameSchema }).strict();
export type TemplateCaptureRequest = z.infer<typeof TemplateCaptureRequestSchema>;

export const TemplateCaptureResponseSchema = z.object({ template: TemplateInfoSchema });
export type TemplateCaptureResponse = z.infer<typeof TemplateCaptureResponseSchema>;

export const TemplateDeleteRequestSchema = z.object({ name: TemplateNameSchema }).strict();
export const TemplateDeleteResponseSchema = z.object({ deleted: z.boolean() });
export type TemplateDeleteResponse = z.infer<typeof TemplateDeleteResponseSchema>;
