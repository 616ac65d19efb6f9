"""Users and roles (admin only), the caller's own identity, and API tokens."""

from django.contrib.auth import get_user_model
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, viewsets
from rest_framework.authtoken.serializers import AuthTokenSerializer
from rest_framework.exceptions import PermissionDenied, Throttled, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..login_throttle import client_ip, lockout_message, lockout_remaining
from ..roles import Role, has_role, role_of, set_role
from ..tokens import token_expires, token_issue

User = get_user_model()


class UserSerializer(serializers.ModelSerializer):
    role = serializers.ChoiceField(choices=Role.choices, write_only=True)
    password = serializers.CharField(write_only=True, required=False, min_length=8, style={"input_type": "password"})

    class Meta:
        model = User
        fields = ["id", "username", "email", "is_active", "role", "password", "last_login", "date_joined"]
        read_only_fields = ["last_login", "date_joined"]

    def to_representation(self, instance):
        data = super().to_representation(instance)
        data["role"] = role_of(instance)
        return data

    def create(self, validated):
        role, password = validated.pop("role"), validated.pop("password", None)
        user = User(**validated)
        user.set_password(password) if password else user.set_unusable_password()
        user.save()
        set_role(user, Role(role))
        return user

    def update(self, instance, validated):
        role, password = validated.pop("role", None), validated.pop("password", None)
        for key, value in validated.items():
            setattr(instance, key, value)
        if password:
            instance.set_password(password)
        instance.save()
        if role:
            set_role(instance, Role(role))
        return instance


class UserViewSet(viewsets.ModelViewSet):
    queryset = User.objects.prefetch_related("groups").order_by("username")
    serializer_class = UserSerializer
    filterset_fields = ["username", "is_active"]

    def check_permissions(self, request):
        super().check_permissions(request)
        if not has_role(request.user, Role.ADMIN):
            raise PermissionDenied("Only admins see and edit users.")


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


class ObtainTokenView(APIView):
    """POST user name and password: the user's API token (a new one if the last has expired). Failed attempts
    count towards the brute-force limit; a locked-out caller gets 429 with Retry-After."""

    authentication_classes = ()
    permission_classes = ()
    throttle_classes = ()

    @extend_schema(request=AuthTokenSerializer, responses={200: TokenSerializer,
                                                           429: OpenApiResponse(description="too many failures")})
    def post(self, request):
        data = AuthTokenSerializer(data=request.data, context={"request": request})
        try:
            data.is_valid(raise_exception=True)
        except ValidationError:
            sent = request.data if isinstance(request.data, dict) else {}
            wait = lockout_remaining(str(sent.get("username") or ""), client_ip(request))
            if wait:
                raise Throttled(wait=wait, detail=lockout_message(wait)) from None
            raise
        return token_response(token_issue(data.validated_data["user"], rotate=False, at=timezone.now()), 200)


class MyTokenView(APIView):
    """POST creates (or rotates) the caller's API token and shows it once."""

    write_role = Role.VIEWER

    @extend_schema(request=None, responses={201: TokenSerializer})
    def post(self, request):
        return token_response(token_issue(request.user, rotate=True, at=timezone.now()), 201)
