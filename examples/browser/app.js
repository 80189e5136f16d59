// Rank sentences against a query with an espresso-export export, client-side.
//
// The export folder (see the project README, "Load it with") is served beside this page; transformers.js
// loads its tokenizer.json, config.json and onnx/model_quantized.onnx (dtype "q8") or onnx/model.onnx
// ("fp32"). The graph's first output, sentence_embedding, is the finished vector (pooling, head and L2
// normalisation inside), so the page only tokenises, runs the graph and takes dot products.
//
// URL parameters: model=<folder under models/> (default "minilm"), dtype=q8|fp32 (default q8).
import { AutoModel, AutoTokenizer, env } from "./node_modules/@huggingface/transformers/dist/transformers.min.js";

const params = new URLSearchParams(location.search);
const MODEL = params.get("model") || "minilm";
const DTYPE = params.get("dtype") || "q8";

// Everything from this server: no model hub, no CDN (the page works offline and sends nothing anywhere).
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.localModelPath = new URL("models/", location.href).pathname; // a path: transformers.js fetches it as local
env.useBrowserCache = false;
env.backends.onnx.wasm.wasmPaths = new URL("node_modules/onnxruntime-web/dist/", location.href).href;
env.backends.onnx.wasm.numThreads = 1; // threads need cross-origin isolation headers a plain server lacks

const SENTENCES = [
  "A man is playing a guitar on stage.", "A woman is playing the violin.", "Someone is playing the piano.",
  "A band performs at a concert.", "A child is singing a song.", "A man is slicing tomatoes.",
  "A woman is cooking pasta in the kitchen.", "Someone is baking bread.", "A chef is chopping onions.",
  "The dog is running across the field.", "A cat is sleeping on the couch.", "Two dogs are playing with a ball.",
  "A horse is galloping on the beach.", "The stock market fell sharply today.", "The central bank raised interest rates.",
  "Investors are worried about inflation.", "A new smartphone was released this week.",
  "The software update fixes several security bugs.", "Scientists discovered a new species of frog.",
  "The football team won the championship.", "A player scored a goal in the last minute.",
  "The marathon runners crossed the finish line.", "It is raining heavily in the city.",
  "A storm is expected this weekend.", "The sun is setting over the mountains.", "A plane is taking off.",
  "The train to Paris is delayed.", "A man is riding a bicycle down the street.",
  "The children are reading books in the library.", "A student is studying for an exam.",
];

const $ = (id) => document.getElementById(id);
const status = (text, error = false) => { $("status").textContent = text; $("status").className = error ? "error" : ""; };

let tokenizer, model;

/** Unit vectors (plain arrays) for `texts`: the graph's sentence_embedding output. */
async function embed(texts) {
  const inputs = tokenizer(texts, { padding: true, truncation: true });
  const output = await model(inputs);
  if (!output.sentence_embedding) throw new Error("the graph has no sentence_embedding output: not an espresso-export export");
  return output.sentence_embedding.tolist();
}

const dot = (a, b) => a.reduce((sum, x, i) => sum + x * b[i], 0);

/** Sentences ranked by cosine to `query` (the vectors are unit length, so cosine is the dot product). */
async function rank(query, sentences) {
  const [q, ...vectors] = await embed([query, ...sentences]);
  return sentences.map((text, i) => ({ text, score: dot(q, vectors[i]) })).sort((a, b) => b.score - a.score);
}

function show(ranked) {
  $("results").replaceChildren(...ranked.map(({ text, score }) => {
    const li = document.createElement("li");
    li.innerHTML = `<span class="score">${score.toFixed(3)}</span><span class="bar" style="width:${Math.max(0, score) * 8}rem"></span>`;
    li.append(text);
    li.dataset.score = score;
    return li;
  }));
}

async function search(event) {
  event?.preventDefault();
  const sentences = $("sentences").value.split("\n").map((s) => s.trim()).filter(Boolean);
  const started = performance.now();
  show(await rank($("query").value, sentences));
  status(`${MODEL} (${DTYPE}): ranked ${sentences.length} sentences in ${Math.round(performance.now() - started)} ms`);
}

async function main() {
  $("sentences").value = SENTENCES.join("\n");
  const started = performance.now();
  tokenizer = await AutoTokenizer.from_pretrained(MODEL);
  model = await AutoModel.from_pretrained(MODEL, { dtype: DTYPE, device: "wasm" });
  status(`${MODEL} (${DTYPE}) loaded in ${Math.round(performance.now() - started)} ms`);
  $("search").addEventListener("submit", search);
  $("rank").disabled = false;
  window.espresso = { embed, rank, ready: true }; // for scripts and tests
  await search();
}

main().catch((error) => { status(`error: ${error.message}`, true); window.espresso = { error: String(error.stack || error) }; });
