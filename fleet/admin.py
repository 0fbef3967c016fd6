"""Django admin for hosts, tokens, enrollment secrets, reports and servers.

Secrets and tokens are shown once, when created, through an admin message;
only their sha256 is stored.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from fleet import token_cache
from fleet.models import AgentToken, ChangeEvent, EnrollmentSecret, Gpu, Host, Report, Server


class ServerInline(admin.TabularInline):
    model = Server
    fields = ("identity", "vllm_version", "pid", "started_at", "is_running", "restart_count")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Host)
class HostAdmin(admin.ModelAdmin):
    list_display = ("hostname", "machine_id", "last_seen", "agent_version")
    search_fields = ("hostname", "machine_id")
    readonly_fields = ("code", "first_seen", "last_seen", "last_collected_at")
    inlines = [ServerInline]
    actions = ["issue_token"]

    @admin.action(description="Issue a new agent token (shown once)")
    def issue_token(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        for host in queryset:
            _, plaintext = AgentToken.issue(host)
            self.message_user(request, f"Token for {host.hostname} (shown once): {plaintext}",
                              messages.WARNING)


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "host", "created_at", "last_used_at", "pending", "secret",
                    "revoked_at")
    list_filter = ("revoked_at", "pending")
    search_fields = ("prefix", "host__hostname")
    readonly_fields = ("host", "prefix", "created_at", "last_used_at", "revoked_at", "secret",
                       "pending", "requested_hostname", "requested_from")
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens come from enrollment or the host action

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        count = queryset.filter(revoked_at=None).update(revoked_at=timezone.now())
        token_cache.bump_epoch()  # update() sends no signal: every worker forgets them
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(EnrollmentSecret)
class EnrollmentSecretAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at", "last_used_at", "uses", "max_uses", "expires_at",
                    "revoked_at")
    fields = ("name", "revoked_at", "uses", "max_uses", "expires_at")
    readonly_fields = ("uses", "max_uses", "expires_at")  # set at creation (settings' defaults)
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: EnrollmentSecret, form: Any,
                   change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created, plaintext = EnrollmentSecret.create(obj.name)
        obj.pk, obj.secret_hash = created.pk, created.secret_hash
        self.message_user(request, f"Enrollment secret (shown once): {plaintext}",
                          messages.WARNING)

    @admin.action(description="Revoke selected secrets")
    def revoke(self, request: HttpRequest, queryset: QuerySet[EnrollmentSecret]) -> None:
        for secret in queryset.filter(revoked_at=None):
            secret.revoke()  # and every token it minted


@admin.register(Report)
class ReportAdmin(admin.ModelAdmin):
    list_display = ("report_id", "host", "collected_at", "received_at", "evaluated_at", "keep")
    list_filter = ("keep",)
    search_fields = ("report_id", "host__hostname")
    readonly_fields = [f.name for f in Report._meta.fields]
    list_select_related = ("host",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # reports arrive through the API only


@admin.register(Server)
class ServerAdmin(admin.ModelAdmin):
    list_display = ("host", "identity", "vllm_version", "pid", "is_running", "restart_count")
    search_fields = ("host__hostname", "identity", "vllm_version")
    exclude = ("last_metrics_snapshot",)
    # An id box, not a <select> of every host and report (each report's str() and raw JSON
    # for a dropdown made the change page load the whole table).
    raw_id_fields = ("host", "last_report")


#: User fields only a superuser may set: each one grants rights beyond the admin role.
PRIVILEGE_FIELDS = ("is_superuser", "is_staff", "groups", "user_permissions")


class GuardedUserAdmin(UserAdmin):
    """Django's UserAdmin, minus the ways a non-superuser admin could escalate.

    The admin role holds ``auth.change_user`` (to manage users in Settings); without this
    class it could tick ``is_superuser`` on itself, add itself to any group or permission,
    and set a superuser's password. For a non-superuser: the privilege fields are read-only
    and a superuser's row (and password form) cannot be changed at all.
    """

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj))
        if request.user.is_superuser:
            return fields
        return fields + PRIVILEGE_FIELDS

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False  # also guards user_change_password, which asks the same
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.is_superuser and not request.user.is_superuser:
            return False
        return super().has_delete_permission(request, obj)


_User = get_user_model()
if admin.site.is_registered(_User):
    admin.site.unregister(_User)
admin.site.register(_User, GuardedUserAdmin)



@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ("host", "index", "name", "uuid", "is_present")
    raw_id_fields = ("host",)


@admin.register(ChangeEvent)
class ChangeEventAdmin(admin.ModelAdmin):
    list_display = ("host", "kind", "at")
    raw_id_fields = ("host", "server", "report")
