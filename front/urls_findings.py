"""Audit pages (login required): findings, knowledge base, versions.
Included by config/urls.py at the site root."""

from django.urls import path

from front import views_findings as views

app_name = "audit"

urlpatterns = [
    path("findings/", views.finding_list, name="findings"),
    path("findings/export.<str:fmt>", views.finding_export, name="findings_export"),
    path("findings/<uuid:code>/", views.finding_detail, name="finding_detail"),
    path("findings/<uuid:code>/acknowledge/", views.finding_acknowledge,
         name="finding_acknowledge"),
    path("findings/<uuid:code>/silence/", views.finding_silence, name="finding_silence"),
    path("kb/", views.kb_list, name="kb"),
    path("kb/<slug:rule_id>/", views.kb_rule, name="kb_rule"),
    path("versions/", views.versions, name="versions"),
]
