"""Agent distribution: the install script and wheel (no login), and the add-host page."""

from django.urls import path

from fleet import agent_dist

app_name = "agent"

urlpatterns = [
    path("install.sh", agent_dist.install_script, name="install_script"),
    path("dist/<str:name>", agent_dist.agent_dist, name="dist"),
    path("add-host/", agent_dist.add_host, name="add_host"),
]
