"""What `inspect`, `ps` and `images` print for a container-table row or an image: docker's shapes
(moby api/types/container, docker/cli formatter) and podman's where they differ (libpod/define)."""

from __future__ import annotations

import json
import os
import time

from simcluster.containers import humane, images
from simcluster.sshnode import pid_alive


def refresh(row: dict) -> dict:
    """A row whose process and monitor are both gone (the monitor was killed) reads as exited, as a daemon that
    lost its shim reports it."""
    st = row["state"]
    if st.get("status") == "running" and not pid_alive(st.get("pid") or 0) and not pid_alive(st.get("monitor_pid") or 0):
        st.update(status="exited", pid=0, exit_code=137, finished_at=st.get("finished_at") or st.get("started_at"))
    return row


def argv(row: dict) -> list[str]:
    return (row.get("entrypoint") or []) + row["cmd"]


def _state(row: dict, podman: bool) -> dict:
    st = row["state"]
    out = {"Status": st["status"], "Running": st["status"] == "running", "Paused": False, "Restarting": False,
           "OOMKilled": False, "Dead": False, "Pid": st.get("pid") or 0, "ExitCode": st.get("exit_code", 0),
           "Error": st.get("error", ""), "StartedAt": humane.rfc3339nano(st.get("started_at")),
           "FinishedAt": humane.rfc3339nano(st.get("finished_at"))}
    if podman:
        out = {"OciVersion": "1.2.0", **out, "ConmonPid": st.get("monitor_pid") or 0}
    return out


def container_json(row: dict, flavor: str, node: dict) -> dict:
    podman = flavor == "podman"
    full = argv(row)
    mounts = [dict(m) for m in row["mounts"]]
    if podman:
        mounts = [{**m, "Driver": "", "Options": ["rbind"]} for m in mounts]
    host_config = {"Binds": row["binds"] or None, "NetworkMode": row["network"], "Devices": row["devices"],
                   "ShmSize": row["shm_size"], "AutoRemove": row["auto_remove"], "Privileged": row["privileged"],
                   "IpcMode": row["ipc"], "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
                   "LogConfig": {"Type": "k8s-file" if podman else "json-file", "Config": {}}}
    config = {"Hostname": node.get("name", ""), "Domainname": "", "User": row.get("user", ""),
              "AttachStdin": False, "AttachStdout": False, "AttachStderr": False, "Tty": row["tty"],
              "OpenStdin": row["interactive"], "StdinOnce": False, "Env": row["env"], "Cmd": row["cmd"] or None,
              "Image": row["image"], "Volumes": None, "WorkingDir": row["workdir"],
              "Entrypoint": row.get("entrypoint"), "Labels": row["labels"]}
    image_id = row["image_id"]
    doc = {"Id": row["id"], "Created": humane.rfc3339nano(row["created"]), "Path": full[0] if full else "",
           "Args": full[1:], "State": _state(row, podman),
           "Image": image_id.removeprefix("sha256:") if podman else image_id,
           "LogPath": row["log"], "Name": row["name"] if podman else "/" + row["name"], "RestartCount": 0,
           "Driver": "overlay" if podman else "overlayfs", "Platform": "linux", "HostConfig": host_config,
           "Mounts": mounts, "Config": config,
           "NetworkSettings": {"Networks": {row["network"]: {}} if row["network"] else {}}}
    if podman:
        doc["ImageName"] = row["image_ref"]
        config.update(Annotations={}, StopSignal="SIGTERM")
    return doc


def _trunc(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "…"


def status_text(row: dict) -> str:
    st = row["state"]
    if st["status"] == "running":
        return "Up " + humane.duration(time.time() - (st.get("started_at") or row["created"]))
    if st["status"] == "exited":
        return f"Exited ({st.get('exit_code', 0)}) {humane.ago(st.get('finished_at') or row['created'])}"
    return "Created"


def docker_ps_row(row: dict, no_trunc: bool) -> dict:
    command = " ".join(argv(row))
    sources = [m["Source"] for m in row["mounts"]]
    return {"Command": json.dumps(command if no_trunc else _trunc(command, 20), ensure_ascii=False),
            "CreatedAt": humane.go_time(row["created"]), "ID": row["id"] if no_trunc else row["id"][:12],
            "Image": row["image"], "Labels": ",".join(f"{k}={v}" for k, v in sorted(row["labels"].items())),
            "LocalVolumes": "0", "Mounts": ",".join(s if no_trunc else _trunc(s, 15) for s in sources),
            "Names": row["name"], "Networks": row["network"], "Ports": "", "RunningFor": humane.ago(row["created"]),
            "Size": "0B", "State": row["state"]["status"], "Status": status_text(row)}


def podman_ps_row(row: dict, no_trunc: bool) -> dict:
    st = row["state"]
    return {"AutoRemove": row["auto_remove"], "Command": argv(row), "CreatedAt": humane.ago(row["created"]),
            "Created": int(row["created"]), "Exited": st["status"] == "exited", "ExitedAt": int(st.get("finished_at") or 0),
            "ExitCode": st.get("exit_code", 0), "Id": row["id"], "Image": row["image_ref"],
            "ImageID": row["image_id"].removeprefix("sha256:"), "IsInfra": False, "Labels": row["labels"],
            "Mounts": [m["Destination"] for m in row["mounts"]], "Names": [row["name"]], "Namespaces": {},
            "Networks": [], "Pid": st.get("pid") or 0, "Pod": "", "PodName": "", "Ports": None, "Restarts": 0,
            "Size": None, "StartedAt": int(st.get("started_at") or 0), "State": st["status"],
            "Status": status_text(row)}


def ps_table(rows: list[dict], flavor: str, no_trunc: bool) -> str:
    head = ["CONTAINER ID", "IMAGE", "COMMAND", "CREATED", "STATUS", "PORTS", "NAMES"]
    body = []
    for row in rows:
        command = " ".join(argv(row))
        if flavor == "docker":
            command = json.dumps(command if no_trunc else _trunc(command, 20), ensure_ascii=False)
            image = row["image"]
        else:
            command = command if no_trunc else _trunc(command, 20)
            image = row["image_ref"]
        body.append([row["id"] if no_trunc else row["id"][:12], image, command, humane.ago(row["created"]),
                     status_text(row), "", row["name"]])
    minwidth, padding = (10, 3) if flavor == "docker" else (12, 2)
    return humane.table([head, *body], minwidth=minwidth, padding=padding)


def image_json(image: dict, flavor: str) -> dict:
    created = humane.rfc3339nano(image.get("created", 1785542400))
    config = {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["/bin/bash"],
              "WorkingDir": "/workspace", "Labels": None}
    if flavor == "podman":
        return {"Id": image["id"].removeprefix("sha256:"), "Digest": image["digest"],
                "RepoTags": [images.normalize(image["ref"])[0] + ":" + images.normalize(image["ref"])[1]],
                "RepoDigests": [images.normalize(image["ref"])[0] + "@" + image["digest"]], "Created": created,
                "Config": config, "Architecture": "arm64", "Os": "linux", "Size": image.get("size", SIZE),
                "Labels": None}
    return {"Id": image["id"], "RepoTags": images.repo_tags(image), "RepoDigests": images.repo_digests(image),
            "Parent": "", "Comment": "", "Created": created, "DockerVersion": "", "Author": "", "Config": config,
            "Architecture": "arm64", "Os": "linux", "Size": image.get("size", SIZE),
            "RootFS": {"Type": "layers", "Layers": []}, "Metadata": {"LastTagTime": humane.ZERO_TIME}}


SIZE = 16_321_000_000  # the simulated image's size when the spec gives none


def image_row(image: dict, no_trunc: bool, digests: bool) -> dict:
    repo, tag, _ = images.normalize(image["ref"])
    short = image["id"] if no_trunc else image["id"].removeprefix("sha256:")[:12]
    created = image.get("created", 1785542400)
    return {"Containers": "N/A", "CreatedAt": humane.go_time(created), "CreatedSince": humane.ago(created),
            "Digest": image["digest"] if digests else "<none>", "ID": short, "Repository": images.familiar(repo),
            "SharedSize": "N/A", "Size": humane.size(image.get("size", SIZE)), "Tag": tag, "UniqueSize": "N/A",
            "VirtualSize": humane.size(image.get("size", SIZE))}


def images_table(rows: list[dict], flavor: str, digests: bool) -> str:
    head = ["REPOSITORY", "TAG", *(["DIGEST"] if digests else []), "IMAGE ID", "CREATED", "SIZE"]
    body = [[r["Repository"], r["Tag"], *([r["Digest"]] if digests else []), r["ID"], r["CreatedSince"], r["Size"]]
            for r in rows]
    minwidth, padding = (10, 3) if flavor == "docker" else (12, 2)
    return humane.table([head, *body], minwidth=minwidth, padding=padding)


def log_path(node_dir, cid: str) -> str:
    return os.path.join(str(node_dir), "containers", cid, "log")
