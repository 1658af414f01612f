// A Tollgate webhook receiver in TypeScript: it verifies each delivery with
// the Standard Webhooks npm package (standardwebhooks), not with Tollgate
// code, and logs the event.
//
//   npm ci && npx tsc && TOLLGATE_WEBHOOK_SECRET=whsec_… PORT=8090 node dist/receiver.js
//
// Given a file argument instead, it verifies one recorded delivery and
// exits 0 (verified) or 1: node dist/receiver.js delivery.json, where the
// file holds {"headers": {...}, "body": "..."} (what the Go test writes).
import { createServer, IncomingMessage, ServerResponse } from "node:http";
import { readFileSync } from "node:fs";
import { Webhook } from "standardwebhooks";

interface TollgateEvent {
  id: string; // the webhook-id: skip it if already handled
  type: string; // quota.threshold, quota.exhausted, entitlements.updated, …
  timestamp: string;
  data: Record<string, unknown>;
}

const secret = process.env.TOLLGATE_WEBHOOK_SECRET ?? "";
if (!secret.startsWith("whsec_")) {
  console.error("set TOLLGATE_WEBHOOK_SECRET to the endpoint's whsec_… secret");
  process.exit(2);
}
const wh = new Webhook(secret);

// verify checks the signature (either one during a secret rotation) and
// that webhook-timestamp is within 5 minutes, then parses the event.
export function verify(body: string, headers: Record<string, string>): TollgateEvent {
  return wh.verify(body, headers) as TollgateEvent;
}

function serve(port: number): void {
  createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method !== "POST" || req.url !== "/webhooks/tollgate") {
      res.writeHead(404).end();
      return;
    }
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) {
        if (typeof v === "string") headers[k] = v;
      }
      try {
        const ev = verify(Buffer.concat(chunks).toString("utf8"), headers);
        console.log(JSON.stringify({ msg: "tollgate event", id: ev.id, type: ev.type, data: ev.data }));
        res.writeHead(204).end(); // answer fast; queue the work
      } catch {
        res.writeHead(400).end("bad signature");
      }
    });
  }).listen(port);
}

const file = process.argv[2];
if (file) {
  const d = JSON.parse(readFileSync(file, "utf8")) as { headers: Record<string, string>; body: string };
  try {
    const ev = verify(d.body, d.headers);
    console.log(JSON.stringify({ verified: true, id: ev.id, type: ev.type }));
  } catch (e) {
    console.log(JSON.stringify({ verified: false, error: String(e) }));
    process.exit(1);
  }
} else {
  serve(Number(process.env.PORT ?? "8090"));
}
