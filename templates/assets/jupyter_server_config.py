# JupyterLab defaults for a container: listen on the container's interfaces, port 8888, work in /workspace.
# Authentication stays on: the token comes from JUPYTER_TOKEN, else Jupyter generates one and logs it.
c = get_config()  # type: ignore[name-defined]  # noqa: F821 - provided by Jupyter when it loads this file
c.ServerApp.ip = "0.0.0.0"  # noqa: S104 - inside the container; publish the port to choose exposure
c.ServerApp.port = 8888
c.ServerApp.open_browser = False
c.ServerApp.root_dir = "/workspace"
