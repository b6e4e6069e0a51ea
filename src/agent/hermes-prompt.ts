import type { OpenAIFunctionTool } from "./messages.js";

/**
 * The Hermes function-calling system prompt: tools described in the prompt for servers that
 * return raw text. The model answers with `<tool_call>` blocks, read back by the tools
 * room's `parseHermesToolCalls`.
 */
export function hermesToolsSystemPrompt(tools: readonly OpenAIFunctionTool[]): string {
  const sigs = tools.map((t) => JSON.stringify(t)).join("\n");
  return (
    "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. " +
    "You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. " +
    `Here are the available tools: <tools>\n${sigs}\n</tools>\n` +
    'Use the following pydantic model json schema for each tool call you will make: {"properties": {"arguments": {"title": "Arguments", "type": "object"}, "name": {"title": "Name", "type": "string"}}, "required": ["arguments", "name"], "title": "FunctionCall", "type": "object"}\n' +
    "For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n" +
    '<tool_call>\n{"name": <function-name>, "arguments": <args-dict>}\n</tool_call>'
  );
}
