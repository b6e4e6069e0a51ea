/**
 * Example external tools for `slotpool tool-server --tools examples/tool-server/weather-tools.mjs`.
 *
 * `lookup_weather` stands for a tool that calls a paid API: it needs WEATHER_API_KEY, which
 * lives only in the ToolServer's environment (never in the sandbox, the env or a log). To
 * keep the example offline it computes a deterministic forecast locally instead of calling
 * out; swap the body of `forecast()` for a real HTTP call.
 */
import { createHash } from "node:crypto";
import { z } from "zod";

const CONDITIONS = ["sunny", "cloudy", "rain", "snow", "fog", "wind"];

function forecast(city, day, apiKey) {
  // The key takes part so that a wrong key gives other answers, as a real API would refuse.
  const h = createHash("sha256").update(`${apiKey}:${city.toLowerCase()}:${day}`).digest();
  return { condition: CONDITIONS[h[0] % CONDITIONS.length], temperature_c: (h[1] % 45) - 10 };
}

export default [
  {
    name: "lookup_weather",
    description: "Look up the weather forecast for a city (today or a few days ahead).",
    kind: "external",
    parameters: z.object({
      city: z.string().min(1, "city must not be empty").describe("City name, e.g. Oslo"),
      days_ahead: z.number().int().min(0).max(6).optional().describe("0 = today (default), up to 6"),
    }),
    async execute(args, ctx) {
      const apiKey = process.env.WEATHER_API_KEY;
      if (!apiKey) {
        return { success: false, error: "the weather service is not configured: WEATHER_API_KEY is not set in the ToolServer's environment" };
      }
      const day = args.days_ahead ?? 0;
      const f = forecast(args.city, day, apiKey);
      ctx.logger.debug({ city: args.city, day }, "forecast computed");
      return {
        output: `${args.city}, ${day === 0 ? "today" : `in ${day} day(s)`}: ${f.condition}, ${f.temperature_c} °C`,
        metadata: { city: args.city, days_ahead: day, ...f },
      };
    },
  },
  {
    name: "unit_convert",
    description: "Convert a temperature between Celsius and Fahrenheit.",
    kind: "external",
    parameters: z.object({
      value: z.number().describe("The temperature to convert"),
      to: z.enum(["celsius", "fahrenheit"]).describe("The unit to convert to"),
    }),
    execute(args) {
      const v = args.to === "fahrenheit" ? (args.value * 9) / 5 + 32 : ((args.value - 32) * 5) / 9;
      return `${Math.round(v * 10) / 10} ${args.to === "fahrenheit" ? "°F" : "°C"}`;
    },
  },
];
