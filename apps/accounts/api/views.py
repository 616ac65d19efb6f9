"""Users and roles (admin only), the caller's own identity, and API tokens."""

import contextlib

from django.contrib.auth import get_user_model
from django.contrib.auth.validators import ASCIIUsernameValidator
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, Throttled, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..login_throttle import client_ip, lockout_message, lockout_remaining
from ..roles import Role, has_role, role_of, stored_role
from ..services import user_create, user_delete, user_update
from ..tokens import token_expires, token_issue

User = get_user_model()


class RoleField(serializers.ChoiceField):
    """A user's role: a write must name one; an answer says null for a user in no role group."""

    def get_attribute(self, instance):
        role = stored_role(instance)
        return role.value if role else None

    def validate_empty_values(self, data):
        if data is None:
            raise ValidationError("choose a role: " + ", ".join(r.value for r in Role))
        return super().validate_empty_values(data)


class RoleFieldSchema(OpenApiSerializerFieldExtension):
    """RoleField's schema: an enum of the roles in requests (required on create), that enum or null in responses."""

    target_class = RoleField

    def map_serializer_field(self, auto_schema, direction):
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if direction == "response":
            schema = {**schema, "enum": [*schema.get("enum", []), None], "nullable": True}
        return schema


class UserSerializer(serializers.ModelSerializer):
    role = RoleField(choices=Role.choices,
                     help_text="The role the user holds (a deactivated user keeps it, but may do nothing); null in an "
                               "answer: in no role group")
    password = serializers.CharField(write_only=True, required=False, min_length=8, style={"input_type": "password"})

    class Meta:
        model = User
        fields = ["id", "username", "email", "is_active", "role", "password", "last_login", "date_joined"]
        read_only_fields = ["last_login", "date_joined"]

    def validate_username(self, value):
        """Letters and digits as the schema's pattern reads to every client (ECMA `\\w`: ASCII only), not
        Django's default (any Unicode letter), so no answer holds a name the schema says cannot be."""
        ASCIIUsernameValidator()(value)
        return value

    def _actor(self):
        request = self.context.get("request")
        return getattr(request, "user", None)

    def create(self, validated):
        with _field_errors():
            return user_create(self._actor(), **validated)

    def update(self, instance, validated):
        with _field_errors():
            return user_update(self._actor(), instance, **validated)


@contextlib.contextmanager
def _field_errors():
    """The services' refusals (Django ValidationError naming the field) as the API's 400."""
    try:
        yield
    except DjangoValidationError as exc:
        detail = exc.message_dict if hasattr(exc, "error_dict") else {"detail": " ".join(exc.messages)}
        raise ValidationError(detail) from None


class UserViewSet(viewsets.ModelViewSet):
    """Users and their roles (admins only). Nobody may deactivate, demote or delete themself, and the last active
    admin may not be deactivated, demoted or deleted: 400 naming the field (`is_active`, `role`; `detail` for a
    delete). Every create, change and delete is audited (passwords never: only that one changed)."""

    queryset = User.objects.prefetch_related("groups").order_by("username")
    serializer_class = UserSerializer
    filterset_fields = ["username", "is_active"]

    def check_permissions(self, request):
        super().check_permissions(request)
        if not has_role(request.user, Role.ADMIN):
            raise PermissionDenied("Only admins see and edit users.")

    @extend_schema(responses={204: None, 400: OpenApiResponse(description="yourself, or the last active admin")})
    def destroy(self, request, *args, **kwargs):
        return super().destroy(request, *args, **kwargs)

    def perform_destroy(self, instance):
        try:
            user_delete(self.request.user, instance)
        except DjangoValidationError as exc:
            raise ValidationError({"detail": " ".join(exc.messages)}) from None


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True)


class MeView(APIView):
    @extend_schema(responses={200: MeSerializer})
    def get(self, request):
        return Response({"username": request.user.username, "role": role_of(request.user)})


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()
    expires = serializers.DateTimeField(allow_null=True, help_text="When it stops working (null: never); "
                                                                  "PDCP_TOKEN_TTL_HOURS after it was made")


def token_response(token, status: int) -> Response:
    return Response({"token": token.key, "expires": token_expires(token)}, status=status)


WRONG_CREDENTIALS = "Wrong user name or password (or the account is deactivated)."


class ObtainTokenView(APIView):
    """POST user name and password: the user's API token (a new one if the last has expired). A wrong user name or
    password is a 401, a missing one a 400 naming the field. Failed attempts count towards the brute-force limit; a
    locked-out caller gets 429 with Retry-After."""

    authentication_classes = ()
    permission_classes = ()
    throttle_classes = ()

    def get_authenticate_header(self, request):
        return "Token"  # a 401 must say how to authenticate (DRF turns a 401 without it into a 403)

    @extend_schema(request=AuthTokenSerializer, responses={
        200: TokenSerializer,
        400: OpenApiResponse(description="a field is missing or not a string (named in the body)"),
        401: OpenApiResponse(description="wrong user name or password, or a deactivated account"),
        429: OpenApiResponse(description="too many failures: try again after Retry-After seconds")})
    def post(self, request):
        data = AuthTokenSerializer(data=request.data, context={"request": request})
        if data.is_valid():
            return token_response(token_issue(data.validated_data["user"], rotate=False, at=timezone.now()), 200)
        sent = request.data if isinstance(request.data, dict) else {}
        wait = lockout_remaining(str(sent.get("username") or ""), client_ip(request))
        if wait:
            raise Throttled(wait=wait, detail=lockout_message(wait))
        if _credentials_refused(data.errors):
            raise AuthenticationFailed(WRONG_CREDENTIALS)
        raise ValidationError(data.errors)


def _credentials_refused(errors) -> bool:
    """Both fields were there and authenticate() said no (AuthTokenSerializer's "authorization" error)."""
    refused = errors.get("non_field_errors") or []
    return set(errors) == {"non_field_errors"} and all(getattr(e, "code", "") == "authorization" for e in refused)


class MyTokenView(APIView):
    """POST creates (or rotates) the caller's API token and shows it once."""

    write_role = Role.VIEWER

    @extend_schema(request=None, responses={201: TokenSerializer})
    def post(self, request):
        return token_response(token_issue(request.user, rotate=True, at=timezone.now()), 201)
