// The practice page: exercise list, statement, editor, run and verdicts. No dependencies.
"use strict";

const $ = (selector) => document.querySelector(selector);
const DETAIL_TITLES = [
  ["input", "输入"], ["expected", "期望输出"], ["actual", "实际输出"],
  ["traceback", "错误信息"], ["stdout", "程序输出（stdout）"], ["stderr", "程序输出（stderr）"],
];
let current = null;
let verdictNames = {};

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

async function loadList() {
  const response = await fetch("/api/exercises");
  const data = await response.json();
  verdictNames = data.verdicts;
  const nav = $("#exercise-list");
  nav.replaceChildren();
  for (const chapter of data.chapters) {
    nav.append(element("h2", `第 ${chapter.chapter} 章`));
    const list = element("ul");
    for (const ex of chapter.exercises) {
      const link = element("a");
      link.href = `#${ex.id}`;
      link.dataset.id = ex.id;
      link.append(element("span", ex.label));
      link.append(element("span", ex.passed ? "✓" : "", "check"));
      if (current && current.id === ex.id) link.classList.add("active");
      const item = element("li");
      item.append(link);
      list.append(item);
    }
    nav.append(list);
  }
}

async function openExercise(id) {
  const response = await fetch(`/api/exercises/${encodeURIComponent(id)}`);
  if (!response.ok) {
    $("#statement").textContent = "没有这道题。";
    $("#workbench").hidden = true;
    return;
  }
  current = await response.json();
  $("#statement").innerHTML = current.statement_html; // rendered by the server from our own files
  $("#code").value = current.code;
  $("#file-name").textContent = current.file;
  $("#workbench").hidden = false;
  $("#result").hidden = true;
  $("#status").textContent = "";
  for (const link of document.querySelectorAll("#exercise-list a")) {
    link.classList.toggle("active", link.dataset.id === String(current.id));
  }
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

async function run() {
  if (!current) return;
  const button = $("#run");
  button.disabled = true;
  $("#status").textContent = "评测中…";
  try {
    const response = await fetch(`/api/exercises/${current.id}/run`, {
      method: "POST",
      headers: {"Content-Type": "application/json"},
      body: JSON.stringify({code: $("#code").value}),
    });
    const data = await response.json();
    if (!response.ok) {
      $("#status").textContent = `出错了：${data.error}`;
      return;
    }
    renderResult(data);
    $("#status").textContent = data.ok ? "全部通过 ✓" : "";
    await loadList();
  } catch (err) {
    $("#status").textContent = `请求失败：${err}`;
  } finally {
    button.disabled = false;
  }
}

$("#run").addEventListener("click", run);
$("#reset").addEventListener("click", () => {
  if (current && confirm("用初始代码覆盖编辑器里的内容？")) $("#code").value = current.starter;
});
$("#code").addEventListener("keydown", (event) => {
  const area = event.target;
  if (event.key === "Tab" && !event.shiftKey) {
    event.preventDefault();
    area.setRangeText("    ", area.selectionStart, area.selectionEnd, "end");
  } else if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    run();
  }
});
window.addEventListener("hashchange", () => openExercise(location.hash.slice(1)));

loadList().then(() => {
  if (location.hash.length > 1) openExercise(location.hash.slice(1));
});
