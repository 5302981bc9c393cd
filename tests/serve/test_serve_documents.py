"""The admin API's documents: ``GET /v1/kb/documents`` lists them with their passage ids and
``DELETE /v1/kb/documents`` removes one as a new version (both with the admin token)."""

from __future__ import annotations

from openbook.corpus import iter_source_passages
from serve_helpers import ADMIN, PASSAGES, client, config, create_app, run, tiny_rag


def test_admin_lists_and_deletes_documents(tmp_path):
    rag, encoder = tiny_rag(tmp_path)
    folder = tmp_path / "handbook"
    folder.mkdir()
    (folder / "ocean.md").write_text("# Ocean\n\nthe largest ocean is the pacific", encoding="utf-8")
    (folder / "peru.txt").write_text("the president of peru", encoding="utf-8")
    rag.kb.sync(iter_source_passages([folder]), lambda batch: encoder.encode_passages(batch))

    async def go():
        async with client(create_app(config(tmp_path, encoder), rag=rag)) as http:
            assert (await http.get("/v1/kb/documents")).status_code == 401
            r = await http.get("/v1/kb/documents", headers=ADMIN)
            assert r.status_code == 200, r.text
            listed = r.json()
            assert listed["kb"] == {"name": "main", "version": 2}
            assert [(d["document"], d["passages"]) for d in listed["documents"]] == [
                ("ocean.md", ["handbook/ocean.md"]), ("peru.txt", ["handbook/peru.txt"]),
                (None, [p.id for p in PASSAGES])]
            r = await http.request("DELETE", "/v1/kb/documents", headers=ADMIN, json={"document": "ocean.md"})
            assert r.json() == {"kb": {"name": "main", "version": 3}, "changed": 1, "replayed": False}, r.text
            r = await http.get("/v1/kb/documents", headers=ADMIN)
            assert [d["document"] for d in r.json()["documents"]] == ["peru.txt", None]
            r = await http.request("DELETE", "/v1/kb/documents", headers=ADMIN, json={"document": "ocean.md"})
            assert r.status_code == 422 and "ocean.md" in r.json()["error"]["message"]
            r = await http.request("DELETE", "/v1/kb/documents", headers=ADMIN, json={"document": ""})
            assert r.status_code == 422 and r.json()["error"]["field"] == "document"

    run(go())
