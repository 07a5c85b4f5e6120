// The practice page: a landing page of chapters and exercises with their status, and for one
// exercise its statement beside a CodeMirror editor, the verdicts and the earlier submissions.
// CodeMirror 5 is vendored under static/vendor/codemirror (see its README.md): no CDN.
"use strict";

const $ = (selector) => document.querySelector(selector);
const DETAIL_TITLES = [
  ["input", "输入"], ["expected", "期望输出"], ["actual", "实际输出"],
  ["traceback", "错误信息"], ["stdout", "程序输出（stdout）"], ["stderr", "程序输出（stderr）"],
];
const ORIGINS = {cli: "终端", web: "网页"};
let current = null;
let verdictNames = {};

// ---- the editor ---------------------------------------------------------------------------------
function words(text) {
  const set = {};
  for (const word of text.split(" ")) set[word] = true;
  return set;
}

// CUDA C++: C++ plus the qualifiers, built-in variables and vector types a kernel uses.
const cpp = CodeMirror.resolveMode("text/x-c++src");
const CUDA_TYPES = words("dim3 half half2 __half __half2 __nv_bfloat16 __nv_bfloat162 " +
  "int2 int4 uint2 uint4 float2 float4 double2 cudaStream_t cudaError_t");
CodeMirror.defineMIME("text/x-cuda", Object.assign({}, cpp, {
  keywords: Object.assign({}, cpp.keywords, words(
    "__global__ __device__ __host__ __shared__ __constant__ __restrict__ __forceinline__ " +
    "__launch_bounds__")),
  builtin: Object.assign({}, cpp.builtin, words(
    "threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __shfl_sync " +
    "__shfl_down_sync __shfl_xor_sync __ballot_sync __any_sync __all_sync atomicAdd")),
  types: (name) => CUDA_TYPES.propertyIsEnumerable(name) || cpp.types(name),
}));

const editor = CodeMirror($("#editor"), {
  lineNumbers: true,
  indentUnit: 4,
  tabSize: 4,
  indentWithTabs: false,
  matchBrackets: true,
  lineWrapping: false, // long lines scroll sideways instead of being cut off or folded
  viewportMargin: Infinity,
  extraKeys: {
    Tab: (cm) => cm.somethingSelected() ? cm.indentSelection("add") : cm.replaceSelection("    "),
    "Shift-Tab": (cm) => cm.indentSelection("subtract"),
    "Ctrl-Enter": () => run(),
    "Cmd-Enter": () => run(),
  },
});
window.minisglEditor = editor; // for the browser test

// ---- small helpers ------------------------------------------------------------------------------
function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

async function getJson(url) {
  const response = await fetch(url);
  return {ok: response.ok, data: await response.json()};
}

function statusText(ex) {
  if (ex.passed) return "✓ 已通过";
  if (ex.attempts) return `✗ 做过 ${ex.attempts} 次，最好 ${ex.best}`;
  return "未做";
}

function statusClass(ex) {
  return ex.passed ? "done" : ex.attempts ? "tried" : "todo";
}

// ---- the landing page ---------------------------------------------------------------------------
async function loadList() {
  const {data} = await getJson("/api/exercises");
  verdictNames = data.verdicts;
  const list = $("#exercise-list");
  list.replaceChildren();
  let passed = 0, total = 0;
  for (const chapter of data.chapters) {
    const card = element("section", undefined, "chapter");
    const done = chapter.exercises.filter((ex) => ex.passed).length;
    const heading = element("h2", `第 ${chapter.chapter} 章 ${chapter.title}`);
    heading.append(element("span", `${done}/${chapter.exercises.length}`, "count"));
    card.append(heading);
    const items = element("ul");
    for (const ex of chapter.exercises) {
      const link = element("a");
      link.href = `#${ex.id}`;
      link.dataset.id = ex.id;
      link.append(element("span", ex.label, "label"));
      link.append(element("span", ex.language === "cuda" ? "CUDA" : "Python", "language"));
      link.append(element("span", statusText(ex), `status ${statusClass(ex)}`));
      const item = element("li");
      item.append(link);
      items.append(item);
    }
    card.append(items);
    list.append(card);
    passed += done;
    total += chapter.exercises.length;
  }
  $("#overall").textContent = `已通过 ${passed}/${total} 道`;
}

function showLanding() {
  current = null;
  $("#exercise-view").hidden = true;
  $("#landing").hidden = false;
  document.title = "minisgl 练习题";
}

// ---- one exercise -------------------------------------------------------------------------------
async function openExercise(id) {
  const {ok, data} = await getJson(`/api/exercises/${encodeURIComponent(id)}`);
  $("#landing").hidden = true;
  $("#exercise-view").hidden = false;
  if (!ok) {
    current = null;
    $("#statement").textContent = "没有这道题。";
    $("#workbench").hidden = true;
    return;
  }
  current = data;
  if (String(current.id) !== id) history.replaceState(null, "", `#${current.id}`); // an old id
  document.title = `${current.label} · minisgl 练习题`;
  $("#statement").innerHTML = current.statement_html; // rendered by the server from our own files
  $("#file-name").textContent = current.file;
  $("#workbench").hidden = false;
  $("#result").hidden = true;
  $("#status").textContent = "";
  editor.setOption("mode", current.language === "cuda" ? "text/x-cuda" : "python");
  editor.setValue(current.code);
  editor.clearHistory();
  editor.refresh();
  await loadSubmissions();
}

function renderResult(result) {
  const summary = $("#summary");
  summary.textContent = result.summary;
  summary.className = result.ok ? "ok" : "bad";
  $("#sandbox").textContent = result.sandbox_line || result.message || "";
  const body = $("#cases tbody");
  body.replaceChildren();
  for (const c of result.cases) {
    const row = element("tr");
    row.append(element("td", String(c.index + 1)));
    row.append(element("td", c.visible ? c.name : `${c.name}（隐藏）`));
    const verdict = element("td", c.verdict, `verdict ${c.verdict}`);
    verdict.title = verdictNames[c.verdict] || "";
    row.append(verdict);
    row.append(element("td", typeof c.cpu_s === "number" ? `${c.cpu_s.toFixed(3)} s` : ""));
    row.append(element("td", c.verdict === "AC" ? "" : c.message));
    body.append(row);
  }
  const failure = $("#failure");
  failure.replaceChildren();
  if (result.first_failure !== null) {
    const c = result.cases[result.first_failure];
    failure.append(element("h3", `第一个未通过的用例：#${c.index + 1} ${c.name} — ${c.verdict}（${verdictNames[c.verdict] || ""}）`));
    if (c.message) failure.append(element("p", c.message));
    for (const [key, title] of DETAIL_TITLES) {
      if (c.details[key]) {
        failure.append(element("h4", title));
        failure.append(element("pre", c.details[key]));
      }
    }
  }
  $("#result").hidden = false;
}

async function loadSubmissions() {
  const {data} = await getJson(`/api/exercises/${current.id}/submissions`);
  const body = $("#submissions tbody");
  body.replaceChildren();
  $("#history-empty").hidden = data.submissions.length > 0;
  $("#submissions").hidden = data.submissions.length === 0;
  for (const s of data.submissions) {
    const row = element("tr");
    row.dataset.id = s.id;
    row.append(element("td", String(s.id)));
    row.append(element("td", s.submitted_at.replace("T", " ")));
    row.append(element("td", ORIGINS[s.origin] || s.origin));
    row.append(element("td", `${s.passed}/${s.total}`, s.ok ? "ok" : "bad"));
    const verdicts = element("td", undefined, "verdicts");
    for (const v of s.verdicts) verdicts.append(element("span", v, `verdict ${v}`));
    row.append(verdicts);
    const open = element("button", "打开", "secondary small");
    open.type = "button";
    open.addEventListener("click", () => reopen(s.id));
    const cell = element("td");
    cell.append(open);
    row.append(cell);
    body.append(row);
  }
}

async function reopen(submissionId) {
  const {ok, data} = await getJson(`/api/submissions/${submissionId}`);
  if (!ok || !current || data.exercise !== current.id) return;
  editor.setValue(data.source);
  $("#status").textContent = `已打开第 ${data.id} 次提交（${data.submitted_at.replace("T", " ")}，${data.passed}/${data.total}）`;
}

async function run() {
  if (!current) return;
  const button = $("#run");
  button.disabled = true;
  $("#status").textContent = "评测中…";
  try {
    const response = await fetch(`/api/exercises/${current.id}/run`, {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({code: editor.getValue()}),
    });
    const data = await response.json();
    if (!response.ok) {
      $("#status").textContent = `出错了：${data.error}`;
      return;
    }
    renderResult(data);
    $("#status").textContent = data.ok ? "全部通过 ✓" : "";
    await Promise.all([loadSubmissions(), loadList()]);
  } catch (err) {
    $("#status").textContent = `请求失败：${err}`;
  } finally {
    button.disabled = false;
  }
}

// ---- wiring -------------------------------------------------------------------------------------
$("#run").addEventListener("click", run);
$("#reset").addEventListener("click", () => {
  if (current && confirm("用初始代码覆盖编辑器里的内容？")) editor.setValue(current.starter);
});

function route() {
  const id = location.hash.slice(1);
  return id ? openExercise(id) : showLanding();
}

window.addEventListener("hashchange", () => {
  route();
  loadList();
});
loadList().then(route).then(() => document.body.classList.add("ready"));
